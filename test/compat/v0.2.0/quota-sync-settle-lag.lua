-- compat: lua/quota-sync.lua of v0.2.0 (f63a65d), before it ran as a Redis Function, with one later change of
-- compat: counting carried in from c8bf94b (the lines between "compat: carried in" and "compat: end") so that it
-- compat: counts as the current script does: approximate usage reported more than SETTLE_LAG_MS after its grant
-- compat: counts from SETTLE_LAG_MS before the report. The storage format is v0.2.0's. Without the "compat:" lines
-- compat: the file is v0.2.0's lua/quota-sync.lua byte for byte (test/unit/tooling/compat-scripts.test.ts).
--[[ quota-sync.lua: one Quotas sync call (protocol 2; sdk/src/wire.ts is the contract and builds the arguments).
Applies an instance's usage and refunds for the keys of one slot group, once per (instance, seq), and
answers each key's allowance (approximate) or reserved tokens (strict).
KEYS[1]    <ns>:q:{<rule>.<group>}:cfg    hash { v = config version, r = encoded rule }
KEYS[2]    <ns>:q:{<rule>.<group>}:seq    hash instance -> "highestSeq:mask" (mask: the 32 seqs below it)
KEYS[3]    <ns>:q:{<rule>.<group>}:inst   sorted set instance -> last sync (ms)
KEYS[3+i]  <ns>:q:{<rule>.<group>}:k:<key_i>   key i: hash { L = layout, h = demand, ring cursors,
           latest buckets and sums (packed), r = older buckets (packed), i:<instance> = that instance's
           demand and grant (packed) }
ARGV[1..5] protocol (2), now (ms), instanceId, seq, configVersion seen; instanceId "" (no client's: the
           protocol refuses it) is a read (`tollgate quotas usage`): nothing is applied, granted or written,
           and the reader is not counted as an instance
ARGV[5+i]  key i: little-endian doubles offered, want, #usage, #refunds, then #usage pairs at, count
           (strict: grantedAt, tokens spent) and #refunds pairs grantedAt, count (packed, never text:
           unpacking is one C call, where parsing "at:count" cost a pattern match and two tonumber each)
Reply      { 2, status ("applied"|"duplicate"|"stale"|"norule"), now, configVersion, rule (encoded, or ""
           when the request saw this version), mode, windows, instances, then per key: amount
           (allowance | tokens), expiresAt (validUntil | leaseExpiresAt), denyUntil, resetAt, used per window }

Windows are rings of buckets with running sums, updated incrementally: a bucket is 50 ms for windows up
to 5 s and W/100 beyond, so a sum is read, never recomputed; windows with the same bucket size share a
ring. approximate reserves each allowance when it grants it (in the key's i:<instance> field)
and settles it at that instance's next applied sync: the usage reported is charged to it (so counted
from the grant), the unused rest goes back, usage beyond it (admitted under a fallback) counts at its
epochs. So allowances handed out at different instants see each other; the windows sum reservations
and usage over the last W/bucket + 1 buckets (the extra bucket covers usage spent up to a bucket after
its grant; spent later, e.g. after a late reply, it leaves the window early: the approximate part).
strict sums the grants not reported spent over every bucket that touches (now - W - lease, now] and the
tokens reported spent (usage: grantedAt:count) over W from the report, so used tokens in any W stay
<= max (docs/DECISIONS.md has the argument). ]]
local REORDER = 32
-- compat: carried in from c8bf94b
local SETTLE_LAG_MS = 100
-- compat: end
local ACTIVE_MS = 5000
local DEMAND_TAU_MS = 1000
-- every instance is credited a pseudo-demand of 1/8 of an even split of the limit's rate: idle
-- instances get an even share (and can admit their first request), busy ones a share close to their
-- demand, and the shares of all instances still add up to 1
local PSEUDO_DEMAND = 1 / 8

-- another protocol's arguments would be read as garbage: a caller with an older copy of wire.ts
if ARGV[1] ~= '2' then return redis.error_reply('ERR quota-sync: protocol 2 expected, got ' .. ARGV[1]) end
local now = tonumber(ARGV[2])
local instance, seq, seen = ARGV[3], tonumber(ARGV[4]), ARGV[5]
-- every entry is checked before anything is written (a script's writes stay when it fails later): little-
-- endian doubles offered, want, #usage, #refunds, then the usage pairs and the refunds'
if #ARGV ~= #KEYS + 2 then return redis.error_reply('ERR quota-sync: one entry per quota key expected') end
for i = 4, #KEYS do
  local entry = ARGV[i + 2]
  local size = #entry
  if size < 32 then return redis.error_reply('ERR quota-sync: malformed entry ' .. (i - 3)) end
  local usages, refunds = struct.unpack('<dd', entry, 17)
  if size ~= 32 + 16 * (usages + refunds) then return redis.error_reply('ERR quota-sync: malformed entry ' .. (i - 3)) end
end
local reading = instance == ''

local cfg = redis.call('HMGET', KEYS[1], 'v', 'r')
local version, ruleText = cfg[1], cfg[2]
-- no configuration, or a removed rule's tombstone (lua/quota-rule.lua)
if not version or version == '' then return { 2, 'norule', now, '', '', '', 0, 0 } end
local reply = { 2, 'applied', now, version, version == seen and '' or ruleText }

-- the rule: mode|leaseMs|fallback|slotGroups|W:max,W:max
local mode, lease, limitsText = string.match(ruleText, '^(%a+)|(%d+)|%a+|%d+|(.+)$')
lease = tonumber(lease)
local strict = mode == 'strict'
-- A limit's window sum is the sum of its parts, each a running sum over the last `span` buckets of a
-- ring (rings are per bucket size and kind, shared by the limits that have them):
--   approximate: one part 'a' of W/bucket + 1 buckets (reservations and usage; the extra bucket so the
--     ring never misses the part of (now - W, now] that precedes its oldest bucket's start);
--   strict: 'g', grants not yet reported spent, over every bucket that touches (now - W - lease, now]
--     (a token may be spent until its lease ends), and 's', tokens reported spent, counted at the report
--     over W/bucket + 1 buckets (each was spent before the report that says so).
local limits, windows, ringList = {}, {}, {}
-- shared rings by kind, then bucket size (numbers as keys: turning a number into text costs thousands of
-- instructions)
local rings = { a = {}, g = {} }
local longest, slowest = 0, nil
local function addPart(limit, kind, span)
  -- strict's spent tokens have a ring per limit: what a report moves there depends on the limit
  local shared = rings[kind]
  local ring = shared and shared[limit.q]
  if not ring then
    ring = { q = limit.q, kind = kind, size = 0, windows = {} }
    if shared then shared[limit.q] = ring end
    ringList[#ringList + 1] = ring
  end
  local part = { w = limit.w, kind = kind, span = span, ring = ring }
  windows[#windows + 1] = part
  limit.parts[#limit.parts + 1] = part
  ring.windows[#ring.windows + 1] = part
  if span > ring.size then ring.size = span end
  if span * limit.q > longest then longest = span * limit.q end
end
for w, m in string.gmatch(limitsText, '(%d+):(%d+)') do
  w, m = tonumber(w), tonumber(m)
  local limit = { w = w, max = m, q = w <= 5000 and 50 or w / 100, parts = {} }
  limits[#limits + 1] = limit
  if strict then
    addPart(limit, 'g', math.ceil((w + lease) / limit.q) + 1)
    addPart(limit, 's', math.ceil(w / limit.q) + 1)
  else
    addPart(limit, 'a', w / limit.q + 1)
  end
  limit.first = limit.parts[1]
  if slowest == nil or m / w < slowest then slowest = m / w end
end
reply[6], reply[7] = mode, #limits

-- a key's stored counts are kept across a change of max, dropped when the bucket layout changes; the
-- leading tag is the storage format (a key stored as b3, one blob, is converted: its counts are kept)
local shape = mode
-- %d, not `..`: a number concatenated is formatted as a float (%.14g), several times dearer
for _, part in ipairs(windows) do shape = shape .. string.format(',%s%d/%d', part.kind, part.w, part.span) end
local layout, previousLayout = 'b4|' .. shape, 'b3|' .. shape

-- idempotency: highest seq applied, and a mask of which of the REORDER seqs below it were applied
local status = 'applied'
local record = redis.call('HGET', KEYS[2], instance)
local high, mask = 0, 0
if record then
  local h, m = string.match(record, '^(%d+):(%-?%d+)$')
  high, mask = tonumber(h), tonumber(m)
end
if seq > high then
  local shift = seq - high
  if high == 0 or shift > REORDER then
    mask = 0
  elseif shift == REORDER then
    mask = bit.lshift(1, REORDER - 1) -- LuaBitOp masks shift counts to 5 bits: never shift by 32
  else
    mask = bit.bor(bit.lshift(mask, shift), bit.lshift(1, shift - 1))
  end
  high = seq
elseif seq == high then
  status = 'duplicate'
elseif high - seq > REORDER then
  status = 'stale'
else
  local flag = bit.lshift(1, high - seq - 1)
  if bit.band(mask, flag) ~= 0 then status = 'duplicate' else mask = bit.bor(mask, flag) end
end
local applied = status == 'applied' and not reading
reply[2] = status
-- %d, not tostring: a seq of 15 digits or more (the schema allows up to 2^53 - 1) would be written 1e+14
if applied then redis.call('HSET', KEYS[2], instance, string.format('%d:%d', high, mask)) end

-- the seq and instance records outlive the longest window, so a replay they no longer know about only
-- carries usage too old to count; their expiry is pushed on for new members and every 16th seq
local retention = math.max(longest, 60000) + 60000
local newInstance = not reading and redis.call('ZADD', KEYS[3], now, instance) == 1
if newInstance or (not reading and seq % 16 == 0) then
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - retention, 'LIMIT', 0, 32)
  if #gone > 0 then
    redis.call('ZREM', KEYS[3], unpack(gone))
    redis.call('HDEL', KEYS[2], unpack(gone))
  end
  redis.call('PEXPIRE', KEYS[2], retention)
  redis.call('PEXPIRE', KEYS[3], retention)
end
local instances = redis.call('ZCOUNT', KEYS[3], now - ACTIVE_MS, '+inf')
reply[8] = instances
-- in requests over one DEMAND_TAU_MS
local pseudo = slowest * DEMAND_TAU_MS * PSEUDO_DEMAND / math.max(instances, 1)

local function decay(count, at)
  if not count then return 0, now end
  if now > at then return count * math.exp((at - now) / DEMAND_TAU_MS), now end
  return count, at
end

-- A key is one hash: 'L' its layout, 'h' its header, 'r' its rings, and 'i:<instance>' per instance
-- ("own demand:its time:grant seq:grant at:grant amount", five little-endian doubles). 'h' holds, as
-- little-endian doubles, the key's demand, its time, the expiry mark, per ring its cursor and the counts
-- of its two latest buckets (the cursor's and the one before), then each window's sum; 'r' every ring's
-- slots as unsigned 32-bit counts, except that the slots of the two latest buckets are stale (their
-- counts are in 'h' until the ring moves past them). A sync reserves in the latest bucket and settles in
-- the grant's (mostly one of the two), so most syncs rewrite only 'h' and their instance field; 'r' is
-- rewritten when a ring moves on (once per bucket and key, however many instances sync) or an older
-- bucket changes. One HMGET and one HSET per key; a slot is read or written at its offset in 'r'.
local RINGS = #ringList
local HEADER = 3 + 3 * RINGS + #windows
local HEADER_FORMAT = '<' .. string.rep('d', HEADER)
-- a slot is an unsigned 32-bit count: a reservation only happens below max (at most 10^9) and is at most
-- max, so it always fits; usage beyond reservations is capped at SLOT_MAX (far beyond any limit)
local SLOT, SLOT_BYTES, SLOT_MAX = '<I4', 4, 4294967295
local offset = 0
for _, ring in ipairs(ringList) do
  ring.base = offset
  ring.vals = {}
  ring.now = math.floor(now / ring.q)
  offset = offset + ring.size * SLOT_BYTES
end
local RING_BYTES = offset
-- the b3 format: one blob 'b', the header (demand, its time, the mark, each ring's cursor, each window's
-- sum) then the rings' slots as in 'r'
local B3_HEADER = 3 + RINGS + #windows
local B3_FORMAT = '<' .. string.rep('d', B3_HEADER)
local INSTANCE_FIELD = 'i:' .. instance
-- own demand, its time, and the last approximate grant: its seq (0: none), time and amount
local INSTANCE_FORMAT = '<ddddd'
local KEY_TTL = longest + 2000

-- the key being updated: its stored slots ('r'), and per ring its two latest buckets (hot0: the cursor's,
-- hot1: the one before), the older slots changed (index -> value), whether any changed and whether the
-- stored slots count as 0 (a new key, or a ring that moved on by its whole size)
local slots = nil

local function read(ring, bucket)
  local c = ring.cur
  if bucket == c then return ring.hot0 end
  if bucket == c - 1 then return ring.hot1 end
  local index = bucket % ring.size
  local value = ring.vals[index]
  if value ~= nil then return value end
  if ring.zero then return 0 end
  return (struct.unpack(SLOT, slots, ring.base + index * SLOT_BYTES + 1))
end

local function write(ring, bucket, value)
  local c = ring.cur
  if bucket == c then
    ring.hot0 = value
  elseif bucket == c - 1 then
    ring.hot1 = value
  else
    ring.vals[bucket % ring.size] = value
    ring.dirty = true
  end
end

-- adds count (a refund: negative, never taking a bucket below 0) to the bucket holding `at` in every
-- ring of that kind, and to the sums of the windows that bucket is in
local function addTo(ring, at, count)
  if at > now then at = now end
  local c = ring.cur
  local bucket = math.floor(at / ring.q)
  if bucket > c then bucket = c end
  if bucket > c - ring.size then
    local value = read(ring, bucket)
    local delta = count
    if value + delta < 0 then delta = -value elseif value + delta > SLOT_MAX then delta = SLOT_MAX - value end
    write(ring, bucket, value + delta)
    for w = 1, #ring.windows do
      local window = ring.windows[w]
      if bucket > c - window.span then window.sum = window.sum + delta end
    end
  end
end

local function add(kind, at, count)
  for k = 1, #ringList do
    if ringList[k].kind == kind then addTo(ringList[k], at, count) end
  end
end

-- reserves `amount` in the ring's current bucket, not now's: a caller whose clock is behind cannot age
-- a grant early (strict: in the grants' rings)
local function reserve(amount)
  for k = 1, #ringList do
    local ring = ringList[k]
    if ring.kind ~= 's' then
      ring.hot0 = ring.hot0 + amount
      for w = 1, #ring.windows do
        local window = ring.windows[w]
        window.sum = window.sum + amount
      end
    end
  end
end

-- a time in the bucket every ring reserved in (the latest ring boundary, or now), for the refund
local function grantTime()
  local at = now
  for k = 1, #ringList do
    local ring = ringList[k]
    if ring.cur * ring.q > at then at = ring.cur * ring.q end
  end
  return at
end

-- what a limit's window holds: the sum of its parts
local function limitSum(limit)
  local sum = 0
  for k = 1, #limit.parts do sum = sum + limit.parts[k].sum end
  return sum
end

-- the new 'r': per ring, pieces of the stored one (or of zeros) with the changed slots packed in between
local function ringBytes()
  local parts = {}
  for r = 1, RINGS do
    local ring = ringList[r]
    local changed = {}
    for index in pairs(ring.vals) do changed[#changed + 1] = index end
    if #changed > 1 then table.sort(changed) end
    local source, start = slots, ring.base + 1
    if ring.zero then source, start = string.rep('\0\0\0\0', ring.size), 1 end
    local from, last = start, start + ring.size * SLOT_BYTES - 1
    for c = 1, #changed do
      local index = changed[c]
      local at = start + index * SLOT_BYTES
      if at > from then parts[#parts + 1] = string.sub(source, from, at - 1) end
      parts[#parts + 1] = struct.pack(SLOT, ring.vals[index])
      from = at + SLOT_BYTES
    end
    if from <= last then parts[#parts + 1] = string.sub(source, from, last) end
  end
  return table.concat(parts)
end

local PAIR_FORMAT = '<dd'
local head = {}
for i = 4, #KEYS do
  local key = KEYS[i]
  local entry = ARGV[i + 2]
  local offered, want, usages, refunds = struct.unpack('<dddd', entry)
  local meta = redis.call('HMGET', key, 'L', 'h', 'r', INSTANCE_FIELD)
  local writeLayout = meta[1] ~= layout
  local stored = nil
  slots = meta[3]
  if not writeLayout then
    if meta[2] and #meta[2] == HEADER * 8 and slots and #slots == RING_BYTES then
      stored = { struct.unpack(HEADER_FORMAT, meta[2]) }
    else
      slots = nil
    end
  elseif meta[1] == previousLayout then
    -- stored as b3: the same counts, read from its blob (written as b4 below; a read converts nothing)
    local blob = redis.call('HGET', key, 'b')
    slots = nil
    if blob and #blob == B3_HEADER * 8 + RING_BYTES then
      local old = { struct.unpack(B3_FORMAT, blob) }
      slots = string.sub(blob, B3_HEADER * 8 + 1)
      stored = { old[1], old[2], old[3] }
      for r = 1, RINGS do
        local ring, c = ringList[r], old[3 + r]
        local slot = function(bucket)
          return (struct.unpack(SLOT, slots, ring.base + (bucket % ring.size) * SLOT_BYTES + 1))
        end
        stored[1 + 3 * r], stored[2 + 3 * r], stored[3 + 3 * r] = c, slot(c), slot(c - 1)
      end
      for j = 1, #windows do stored[3 + 3 * RINGS + j] = old[3 + RINGS + j] end
    end
  elseif meta[1] then
    -- another bucket layout: the key starts again
    if not reading then redis.call('DEL', key) end
    meta = {}
    slots = nil
  end
  for j = 1, #windows do windows[j].sum = stored and stored[3 + 3 * RINGS + j] or 0 end
  for r = 1, #ringList do
    local ring = ringList[r]
    local c = ring.now
    local last = stored and stored[1 + 3 * r] or nil
    ring.zero = not last
    ring.dirty = not last or writeLayout
    if next(ring.vals) then ring.vals = {} end
    if last then
      ring.hot0, ring.hot1 = stored[2 + 3 * r], stored[3 + 3 * r]
    else
      ring.hot0, ring.hot1 = 0, 0
    end
    if not last or last == c then
      -- a new key (every slot 0), or the ring is where it was
    elseif last > c then
      c = last -- a caller whose clock is behind never rewinds the ring; it writes to the ring's bucket
    elseif c - last >= ring.size then
      ring.zero, ring.dirty = true, true
      ring.hot0, ring.hot1 = 0, 0
      for w = 1, #ring.windows do ring.windows[w].sum = 0 end
    else
      -- moved on by one bucket or several: those leaving each window (newer than `last`: never written)
      -- are taken off its sum; the two latest buckets go to their slots as they stop being the latest,
      -- and the slots of the buckets passed over start again from 0
      ring.cur = last
      for b = last + 1, c do
        for w = 1, #ring.windows do
          local window = ring.windows[w]
          if b - window.span <= last then window.sum = window.sum - read(ring, b - window.span) end
        end
      end
      local size = ring.size
      if c - last == 1 then
        ring.vals[(last - 1) % size] = ring.hot1
        ring.hot1 = ring.hot0
      else
        ring.vals[last % size], ring.vals[(last - 1) % size] = ring.hot0, ring.hot1
        for b = last + 1, c - 2 do ring.vals[b % size] = 0 end
        ring.hot1 = 0
      end
      ring.hot0 = 0
      ring.dirty = true
    end
    ring.cur = c
  end

  -- this instance's own demand and its last approximate grant
  local ownStored, ownAtStored, grantSeq, grantAt, credit = nil, nil, 0, 0, 0
  if meta[4] and #meta[4] == 40 then
    ownStored, ownAtStored, grantSeq, grantAt, credit = struct.unpack(INSTANCE_FORMAT, meta[4])
  end

  -- approximate: this instance's previous allowance was reserved when granted; the usage reported now
  -- is charged to that reservation (it counts from the grant, the window's one extra bucket covering
  -- the interval in which it was spent), what it did not use goes back, and usage beyond it (admitted
  -- under a fallback) counts at its own epochs
  if applied and not strict then
    local left = credit
    for u = 0, usages - 1 do
      local at, count = struct.unpack(PAIR_FORMAT, entry, 33 + 16 * u)
      local take = math.min(left, count)
      left = left - take
      if count > take then add('a', at, count - take) end
    end
    -- compat: carried in from c8bf94b
    -- (from the key's time, as a grant: a reporter whose clock is behind the key's cannot age it early)
    local charged, late = credit - left, grantTime() - SETTLE_LAG_MS
    if charged > 0 and late > grantAt then
      add('a', grantAt, -charged)
      add('a', late, charged)
    end
    -- compat: end
    if left > 0 then add('a', grantAt, -left) end
  end
  -- strict: refunds leave the grant's bucket; tokens reported spent ([grantedAt, count] in `usage`) too,
  -- and count from now over W instead (spent before now, they are in no window that starts after now - W)
  if applied and strict then
    for u = usages, usages + refunds - 1 do
      local at, count = struct.unpack(PAIR_FORMAT, entry, 33 + 16 * u)
      add('g', at, -count)
    end
    for u = 0, usages - 1 do
      local at, count = struct.unpack(PAIR_FORMAT, entry, 33 + 16 * u)
      at = math.min(at, now)
      -- a limit whose window no longer counts the grant has no use for its tokens either
      for j = 1, #limits do
        local grants, spent = limits[j].parts[1], limits[j].parts[2]
        local bucket = math.min(math.floor(at / grants.ring.q), grants.ring.cur)
        if bucket > grants.ring.cur - grants.span then addTo(spent.ring, now, count) end
      end
      add('g', at, -count)
    end
  end

  -- demand: the key's offered requests and this instance's, as counts decaying with DEMAND_TAU_MS;
  -- the instance's share is its part of the recent demand
  local demand, demandAt = decay(stored and stored[1], stored and stored[2])
  local own, ownAt = decay(ownStored, ownAtStored)
  if applied then
    demand, own = demand + offered, own + offered
  end
  local share = (own + pseudo) / (demand + instances * pseudo)
  if share > 1 then share = 1 end

  -- the tightest window decides
  local tight, remaining = nil, nil
  for j = 1, #limits do
    local limit = limits[j]
    local left = limit.max - limitSum(limit)
    if remaining == nil or left < remaining then tight, remaining = limit, left end
  end
  -- strict: the instance's part of what is left, or of twice what a bucket frees at the limit's rate when
  -- less is left: a part of what is left alone shrinks with it, and syncs that each take a part of a small
  -- remainder leave about a third of what a bucket frees ungranted ((1 - 1/N)^N), idle capacity.
  -- approximate takes twice its part of what is left (never more than is left): with one part, the N
  -- syncs of an interval left about a third of it ungranted ((1 - 1/N)^N), with two about an eighth
  -- (e^-2). No floor as strict's: the small remainder kept absorbs what instances spend outside their
  -- reservation (late replies), and granting it all raised the over-admission under load
  local fair = share * math.max(remaining, 2 * tight.max * tight.q / tight.w)
  local amount, denyUntil = 0, 0
  if strict then
    if applied and want > 0 and remaining > 0 then
      amount = math.min(want, remaining, math.ceil(fair))
      reserve(amount)
      remaining = remaining - amount
    end
  elseif applied then
    if remaining > 0 then
      amount = math.floor(math.min(remaining, 2 * share * remaining))
      -- never more than about two intervals of what this instance was offered in its last one: a
      -- reservation it would not spend is capacity the other instances cannot have until its next sync
      if amount > 2 * offered + 1 then amount = 2 * offered + 1 end
      if amount == 0 and remaining >= instances then amount = 1 end
      reserve(amount) -- `remaining` stays as it was: denyUntil means nothing could be granted
    end
    grantSeq, grantAt, credit = seq, grantTime(), amount
  elseif grantSeq == seq then
    amount = credit -- a retry of the sync that granted it: the same allowance again
  end
  if remaining <= 0 then denyUntil = (tight.first.ring.cur + 1) * tight.q end

  local expiresMark = stored and stored[3] or nil
  local refresh = not expiresMark or now - expiresMark >= 1000
  local added = 0
  if not reading then
    head[1], head[2], head[3] = demand, demandAt, refresh and now or expiresMark
    local dirty = false
    for r = 1, RINGS do
      local ring = ringList[r]
      head[1 + 3 * r], head[2 + 3 * r], head[3 + 3 * r] = ring.cur, ring.hot0, ring.hot1
      dirty = dirty or ring.dirty
    end
    for j = 1, #windows do head[3 + 3 * RINGS + j] = windows[j].sum end
    local header = struct.pack(HEADER_FORMAT, unpack(head, 1, HEADER))
    local instanceValue = struct.pack(INSTANCE_FORMAT, own, ownAt, grantSeq, grantAt, credit)
    if writeLayout then
      redis.call('HSET', key, 'h', header, 'r', ringBytes(), INSTANCE_FIELD, instanceValue, 'L', layout)
      if meta[1] == previousLayout then redis.call('HDEL', key, 'b') end
    elseif dirty then
      redis.call('HSET', key, 'h', header, 'r', ringBytes(), INSTANCE_FIELD, instanceValue)
    else
      redis.call('HSET', key, 'h', header, INSTANCE_FIELD, instanceValue)
    end
    if not meta[4] then added = 1 end
    if refresh then redis.call('PEXPIRE', key, KEY_TTL) end
  end
  -- an instance new to the key: when the key holds many more instances than sync the group lately, the
  -- fields of those silent for longer than the seq records are kept go (their grants left every window)
  if added > 0 and redis.call('HLEN', key) > 2 * instances + 10 then
    local all = redis.call('HGETALL', key)
    local gone = {}
    for f = 1, #all, 2 do
      if string.sub(all[f], 1, 2) == 'i:' and (struct.unpack('<d', all[f + 1], 9)) < now - retention then
        gone[#gone + 1] = all[f]
      end
    end
    if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  end

  reply[#reply + 1] = amount
  reply[#reply + 1] = now + lease
  reply[#reply + 1] = denyUntil
  reply[#reply + 1] = (tight.first.ring.cur + tight.first.span) * tight.q
  for j = 1, #limits do reply[#reply + 1] = limitSum(limits[j]) end
end
return reply
