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
           (strict: grantedAt, tokens spent) and #refunds pairs grantedAt, count, then (strict, optional)
           #usage doubles spentAgo: those tokens were spent at least that many ms before the request was
           sent (absent: 0 each; never dated before their grant) (packed, never text: unpacking is one C
           call, where parsing "at:count" cost a pattern match and two tonumber each)
Reply      { 2, status ("applied"|"duplicate"|"stale"|"norule"), now, configVersion, rule (encoded, or ""
           when the request saw this version), mode, windows, instances, then per key: amount
           (allowance | tokens), expiresAt (validUntil | leaseExpiresAt), denyUntil, resetAt, used per window }

Windows are rings of buckets with running sums, updated incrementally: a bucket is 50 ms for windows up
to 5 s and W/100 beyond (strict's spent tokens: W/100 always, 10 ms for 1 s), so a sum is read, never recomputed; windows with the same bucket size share a
ring. approximate reserves each allowance when it grants it (in the key's i:<instance> field)
and settles it at that instance's next applied sync: the usage reported is charged to it (so counted
from the grant, or from SETTLE_LAG_MS before the report when that is later), the unused rest goes back,
usage beyond it (admitted under a fallback) counts at its epochs. So allowances handed out at different
instants see each other; the windows sum reservations and usage over the last W/bucket + 1 buckets (the
extra bucket covers usage spent up to a bucket after its grant; spent later, e.g. after a late reply, it
leaves the window early, by SETTLE_LAG_MS at most: the approximate part).
strict sums the grants not reported spent over every bucket that touches (now - W - lease, now] and the
tokens reported spent (usage: grantedAt:count) over W plus STAMP_SKEW_MS from their stamp (now - spentAgo,
the report's now without one: never before the spend on the reporter's clock, and the extra time covers
callers' clocks that disagree by up to that much), so used tokens in any W stay <= max (docs/DECISIONS.md
has the argument).
The chunk returns the call as a function of (KEYS, ARGV): run as a Redis Function, the structures of
a rule (its limits, rings and windows, the formats of a key) are built once per rule text and node
(prepare, below), and the functions over them once per node, not once per call. ]]
local REORDER = 32
local ACTIVE_MS = 5000
local DEMAND_TAU_MS = 1000
-- every instance is credited a pseudo-demand of 1/8 of an even split of the limit's rate: idle
-- instances get an even share (and can admit their first request), busy ones a share close to their
-- demand, and the shares of all instances still add up to 1
local PSEUDO_DEMAND = 1 / 8
-- callers' clocks are trusted to agree within this many ms: each caller's now is its own clock, so strict's
-- spent tokens count over W plus at least this much from their date (the stamp, or the report), which is on
-- the reporter's clock; without it a caller a few ms behind filed a spend in the bucket before its use, out
-- of every window early (an age dated later by this much, as before, left reports without an age uncovered)
local STAMP_SKEW_MS = 10
-- approximate: usage charged to a reservation counts from the grant, or from this long before its report
-- when that is later (two buckets of 50 ms: a report on time, about an interval after its grant, counts
-- from the grant as before); so no usage leaves a window more than this early
local SETTLE_LAG_MS = 100
-- strict: the buckets of a window's spent tokens (their ring's bucket is W / SPENT_BUCKETS)
local SPENT_BUCKETS = 100

-- a slot is an unsigned 32-bit count: a reservation only happens below max (at most 10^9) and is at most
-- max, so it always fits; usage beyond reservations is capped at SLOT_MAX (far beyond any limit)
local SLOT, SLOT_BYTES, SLOT_MAX = '<I4', 4, 4294967295
-- own demand, its time, and the last approximate grant: its seq (0: none), time and amount
local INSTANCE_FORMAT = '<ddddd'
local PAIR_FORMAT = '<dd'
-- the most values one unpack() hands a command (Lua 5.1's C stack holds about 8,000)
local UNPACK_SLICE = 1000
-- the standard functions the per-key path calls, bound at the start of every call (Redis 7.0 runs a
-- library's top level with only `redis` in reach): a local is one VM step, a global's field three
local floor, min, max, exp, spack, sunpack, rcall

-- The rule of a call, prepared from its text (cached per text: a node holds few rules, and a policy that
-- changes often starts the cache again past PREPARED_MAX texts):
--   limits (w, max, bucket q, parts, first and second part, strict's floor), windows (the parts: w,
--   kind, span, ring, and per key their sum), ringList (q, kind, size, base in 'r', windows; per key
--   cur, hot0, hot1, vals, zero, dirty), ringsOf (rings by kind), reserveRings, and the layout and
--   formats of a key stored under it.
local PREPARED_MAX = 64
local prepared, preparedCount = {}, 0
local function prepare(ruleText)
  local P = prepared[ruleText]
  if P then return P end
  -- the rule: mode|leaseMs|fallback|slotGroups|W:max,W:max
  local mode, lease, limitsText = string.match(ruleText, '^(%a+)|(%d+)|%a+|%d+|(.+)$')
  lease = tonumber(lease)
  local strict = mode == 'strict'
  -- A limit's window sum is the sum of its parts, each a running sum over the last `span` buckets of a
  -- ring (rings are per bucket size and kind, shared by the limits that have them):
  --   approximate: one part 'a' of W/bucket + 1 buckets (reservations and usage; the extra bucket so the
  --     ring never misses the part of (now - W, now] that precedes its oldest bucket's start);
  --   strict: 'g', grants not yet reported spent, over every bucket that touches (now - W - lease, now]
  --     (a token may be spent until its lease ends), and 's', tokens reported spent, counted from their
  --     stamp (or the report) over 101 buckets of W/100 and the ones that cover STAMP_SKEW_MS (each was
  --     spent before the stamp that says so, on the reporter's clock).
  local limits, windows, ringList = {}, {}, {}
  -- shared rings by kind, then bucket size (numbers as keys: turning a number into text costs thousands of
  -- instructions)
  local rings = { a = {}, g = {} }
  local longest, slowest = 0, nil
  local function addPart(limit, kind, span, q)
    -- strict's spent tokens have a ring per limit: what a report moves there depends on the limit
    local shared = rings[kind]
    local ring = shared and shared[q]
    if not ring then
      ring = { q = q, kind = kind, size = 0, windows = {} }
      if shared then shared[q] = ring end
      ringList[#ringList + 1] = ring
    end
    local part = { w = limit.w, kind = kind, span = span, ring = ring }
    windows[#windows + 1] = part
    limit.parts[#limit.parts + 1] = part
    ring.windows[#ring.windows + 1] = part
    if span > ring.size then ring.size = span end
    if span * q > longest then longest = span * q end
  end
  for w, m in string.gmatch(limitsText, '(%d+):(%d+)') do
    w, m = tonumber(w), tonumber(m)
    local limit = { w = w, max = m, q = w <= 5000 and 50 or w / 100, parts = {} }
    limits[#limits + 1] = limit
    if strict then
      addPart(limit, 'g', math.ceil((w + lease) / limit.q) + 1, limit.q)
      -- spent tokens in W/100 buckets (10 ms for 1 s): a spent token holds the limit until the end of the
      -- bucket its W ends in, so a bucket of W/20 (the grants') held each token about 5 % past W, and the
      -- fleet, spending as capacity frees, about a whole bucket past it (utilisation ~95 % at best); then
      -- the buckets that cover STAMP_SKEW_MS (one for W >= 1 s)
      local q = w / SPENT_BUCKETS
      addPart(limit, 's', SPENT_BUCKETS + 1 + math.ceil(STAMP_SKEW_MS / q), q)
    else
      addPart(limit, 'a', math.ceil(w / limit.q) + 1, limit.q)
    end
    limit.first, limit.second = limit.parts[1], limit.parts[2]
    -- strict grants from at least twice what a bucket frees at the limit's rate (below)
    limit.floor = 2 * m * limit.q / w
    if slowest == nil or m / w < slowest then slowest = m / w end
  end

  -- a key's stored counts are kept across a change of max, dropped when the bucket layout changes; the
  -- leading tag is the storage format (a key stored as b3, one blob, is converted: its counts are kept)
  local shape = mode
  -- %d, not `..`: a number concatenated is formatted as a float (%.14g), several times dearer
  for _, part in ipairs(windows) do shape = shape .. string.format(',%s%d/%d', part.kind, part.w, part.span) end
  local layout, previousLayout = 'b4|' .. shape, 'b3|' .. shape

  local RINGS = #ringList
  local HEADER = 3 + 3 * RINGS + #windows
  local HEADER_FORMAT = '<' .. string.rep('d', HEADER)
  -- where the windows' sums start in the header
  local SUMS_AT = 3 + 3 * RINGS
  local offset = 0
  for _, ring in ipairs(ringList) do
    ring.base = offset
    ring.vals = {}
    offset = offset + ring.size * SLOT_BYTES
  end
  local RING_BYTES = offset
  -- the rings of each kind, and those a grant is reserved in (every kind but strict's spent tokens)
  local ringsOf, reserveRings = { a = {}, g = {}, s = {} }, {}
  for _, ring in ipairs(ringList) do
    local list = ringsOf[ring.kind]
    list[#list + 1] = ring
    if ring.kind ~= 's' then reserveRings[#reserveRings + 1] = ring end
  end
  -- the b3 format: one blob 'b', the header (demand, its time, the mark, each ring's cursor, each window's
  -- sum) then the rings' slots as in 'r'
  local B3_HEADER = 3 + RINGS + #windows
  local B3_FORMAT = '<' .. string.rep('d', B3_HEADER)
  local KEY_TTL = math.ceil(longest) + 2000

  P = {
    mode = mode, lease = lease, strict = strict, limits = limits, windows = windows, ringList = ringList,
    ringsOf = ringsOf, reserveRings = reserveRings, longest = longest, slowest = slowest, layout = layout,
    previousLayout = previousLayout, RINGS = RINGS, HEADER = HEADER, HEADER_FORMAT = HEADER_FORMAT,
    SUMS_AT = SUMS_AT, RING_BYTES = RING_BYTES, B3_HEADER = B3_HEADER, B3_FORMAT = B3_FORMAT,
    KEY_TTL = KEY_TTL,
  }
  if preparedCount >= PREPARED_MAX then prepared, preparedCount = {}, 0 end
  prepared[ruleText], preparedCount = P, preparedCount + 1
  return P
end

-- this call's time and its rule's rings (set at the start of every call: upvalues of the functions below)
local now, ringList, ringsOf, reserveRings, RING_BYTES

local function decay(count, at)
  if now > at then return count * exp((at - now) / DEMAND_TAU_MS), now end
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

-- the key being updated: its stored slots ('r', read only when an older bucket is read or 'r' is
-- rewritten: most syncs touch only the two latest buckets, whose counts are in 'h'; false: none stored,
-- or not of this layout's size, read as 0), and per ring its two latest buckets (hot0: the cursor's,
-- hot1: the one before), the older slots changed (index -> value), whether any changed and whether the
-- stored slots count as 0 (a new key, or a ring that moved on by its whole size)
local slots, slotsKey = nil, nil
local function storedSlots()
  if slots == nil then
    local stored = rcall('HGET', slotsKey, 'r')
    slots = stored and #stored == RING_BYTES and stored or false
  end
  return slots
end

local function read(ring, bucket)
  local c = ring.cur
  if bucket == c then return ring.hot0 end
  if bucket == c - 1 then return ring.hot1 end
  local index = bucket % ring.size
  local value = ring.vals[index]
  if value ~= nil then return value end
  if ring.zero then return 0 end
  local stored = slots or storedSlots()
  if not stored then return 0 end
  return (sunpack(SLOT, stored, ring.base + index * SLOT_BYTES + 1))
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
  local bucket = floor(at / ring.q)
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
  local list = ringsOf[kind]
  for k = 1, #list do addTo(list[k], at, count) end
end

-- reserves `amount` in the ring's current bucket, not now's: a caller whose clock is behind cannot age
-- a grant early (strict: in the grants' rings)
local function reserve(amount)
  for k = 1, #reserveRings do
    local ring = reserveRings[k]
    ring.hot0 = ring.hot0 + amount
    local parts = ring.windows
    for w = 1, #parts do
      local window = parts[w]
      window.sum = window.sum + amount
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

-- what a limit's window holds: the sum of its parts (one, or strict's two)
local function limitSum(limit)
  local second = limit.second
  if second then return limit.first.sum + second.sum end
  return limit.first.sum
end

-- the new 'r': per ring, pieces of the stored one (or of zeros) with the changed slots packed in between
local function ringBytes()
  local parts = {}
  for r = 1, #ringList do
    local ring = ringList[r]
    local changed = {}
    for index in pairs(ring.vals) do changed[#changed + 1] = index end
    if #changed > 1 then table.sort(changed) end
    local source, start = not ring.zero and (slots or storedSlots()), ring.base + 1
    if not source then source, start = string.rep('\0\0\0\0', ring.size), 1 end
    local from, last = start, start + ring.size * SLOT_BYTES - 1
    for c = 1, #changed do
      local index = changed[c]
      local at = start + index * SLOT_BYTES
      if at > from then parts[#parts + 1] = string.sub(source, from, at - 1) end
      parts[#parts + 1] = spack(SLOT, ring.vals[index])
      from = at + SLOT_BYTES
    end
    if from <= last then parts[#parts + 1] = string.sub(source, from, last) end
  end
  return table.concat(parts)
end

-- A key stored under another layout (b4, or b3's header), as a header of this one (or nil: a header that does
-- not match its layout). Each window's count is known, not when it was counted: every ring starts with its
-- windows' largest count in the latest bucket (now's, or the old rings' when they are ahead), so each window
-- counts at least what it held, for up to a window more (an over-count, never an under-count: strict stays
-- exact). A window the old layout did not have takes the
-- largest count of the old ones (history it never kept is not known), except strict's grants, which start
-- at 0 as their tokens are counted spent; approximate counts what strict held in both parts, and strict
-- counts what approximate held as spent.
local function carriedOver(oldLayout, header, windows)
  local parts = {}
  for kind, w in string.gmatch(oldLayout, ',(%a)(%d+)/%d+') do parts[#parts + 1] = { kind = kind, w = tonumber(w) } end
  -- a header holds at most 3 + 4 doubles per part (a ring's cursor and two latest buckets, a window's sum)
  local doubles = #header / 8
  if doubles ~= floor(doubles) or doubles < 3 + #parts or doubles > 3 + 4 * #parts then return nil end
  local old = { sunpack('<' .. string.rep('d', doubles), header) }
  local byPart, byWindow, largest = {}, {}, 0
  for j, part in ipairs(parts) do
    local sum = old[doubles - #parts + j]
    byPart[part.kind .. part.w] = sum
    byWindow[part.w] = (byWindow[part.w] or 0) + sum
    if byWindow[part.w] > largest then largest = byWindow[part.w] end
  end
  -- where the old rings stand: the first ring's cursor (4th double, in b3 and b4) in buckets of the first
  -- part's size (a ring of reservations or grants: 50 ms up to 5 s, W/100 beyond, in every layout so far)
  local firstW = parts[1] and parts[1].w or 0
  local latest = (old[4] or 0) * (firstW <= 5000 and 50 or firstW / 100)
  local stored = { old[1], old[2], old[3] }
  for r = 1, #ringList do
    local ring = ringList[r]
    local seed = 0
    for _, window in ipairs(ring.windows) do
      local sum = byPart[window.kind .. window.w]
      if sum == nil then
        if window.kind == 'g' then sum = 0 else sum = byWindow[window.w] or largest end
      end
      if sum > seed then seed = sum end
    end
    -- a slot holds at most SLOT_MAX (a window's sum may be more): far beyond any max, so the window stays full
    if seed > SLOT_MAX then seed = SLOT_MAX end
    ring.seed = seed
    -- in the latest bucket: now's, or the old rings' if they are ahead (a caller whose clock is behind
    -- never rewinds a ring; spent tokens' windows are STAMP_SKEW_MS longer for callers ahead)
    stored[1 + 3 * r], stored[2 + 3 * r], stored[3 + 3 * r] = floor(max(now, latest) / ring.q), seed, 0
  end
  for j, window in ipairs(windows) do stored[3 + 3 * #ringList + j] = window.ring.seed end
  return stored
end

-- the doubles of a b3 blob's header: demand, its time, the mark, each ring's cursor, each window's sum (rings
-- as b3 laid them out: grants' and approximate's shared per bucket size, 50 ms up to 5 s and W/100 beyond;
-- spent tokens' one per limit)
local function b3HeaderDoubles(oldLayout)
  local rings, parts, seen = 0, 0, {}
  for kind, w in string.gmatch(oldLayout, ',(%a)(%d+)/%d+') do
    parts = parts + 1
    w = tonumber(w)
    local name = kind .. (w <= 5000 and 50 or w / 100)
    if kind == 's' or not seen[name] then rings, seen[name] = rings + 1, true end
  end
  return 3 + rings + parts
end

local head = {}
return function(KEYS, ARGV)
  -- another protocol's arguments would be read as garbage: a caller with an older copy of wire.ts
  if ARGV[1] ~= '2' then return redis.error_reply('ERR quota-sync: protocol 2 expected, got ' .. ARGV[1]) end
  floor, min, max, exp = math.floor, math.min, math.max, math.exp
  spack, sunpack, rcall = struct.pack, struct.unpack, redis.call
  now = tonumber(ARGV[2])
  local instance, seq, seen = ARGV[3], tonumber(ARGV[4]), ARGV[5]
  -- every entry is checked before anything is written (a script's writes stay when it fails later): little-
  -- endian doubles offered, want, #usage, #refunds, then the usage pairs and the refunds'
  if #ARGV ~= #KEYS + 2 then return redis.error_reply('ERR quota-sync: one entry per quota key expected') end
  for i = 4, #KEYS do
    local entry = ARGV[i + 2]
    local size = #entry
    if size < 32 then return redis.error_reply('ERR quota-sync: malformed entry ' .. (i - 3)) end
    local usages, refunds = sunpack('<dd', entry, 17)
    local base = 32 + 16 * (usages + refunds)
    if size ~= base and size ~= base + 8 * usages then
      return redis.error_reply('ERR quota-sync: malformed entry ' .. (i - 3))
    end
  end
  local reading = instance == ''

  local cfg = rcall('HMGET', KEYS[1], 'v', 'r')
  local version, ruleText = cfg[1], cfg[2]
  -- no configuration, or a removed rule's tombstone (lua/quota-rule.lua)
  if not version or version == '' then return { 2, 'norule', now, '', '', '', 0, 0 } end
  local reply = { 2, 'applied', now, version, version == seen and '' or ruleText }
  local n = 8 -- the reply's last entry

  local P = prepare(ruleText)
  local mode, lease, strict, limits, windows = P.mode, P.lease, P.strict, P.limits, P.windows
  local longest, slowest, layout, previousLayout = P.longest, P.slowest, P.layout, P.previousLayout
  local RINGS, HEADER, HEADER_FORMAT, SUMS_AT = P.RINGS, P.HEADER, P.HEADER_FORMAT, P.SUMS_AT
  local B3_HEADER, B3_FORMAT, KEY_TTL = P.B3_HEADER, P.B3_FORMAT, P.KEY_TTL
  ringList, ringsOf, reserveRings, RING_BYTES = P.ringList, P.ringsOf, P.reserveRings, P.RING_BYTES
  for r = 1, RINGS do
    local ring = ringList[r]
    ring.now = floor(now / ring.q)
  end
  reply[6], reply[7] = mode, #limits

  -- idempotency: highest seq applied, and a mask of which of the REORDER seqs below it were applied
  local status = 'applied'
  local record = rcall('HGET', KEYS[2], instance)
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
  if applied then rcall('HSET', KEYS[2], instance, string.format('%d:%d', high, mask)) end

  -- the seq and instance records outlive the longest window, so a replay they no longer know about only
  -- carries usage too old to count; their expiry is pushed on for new members and every 16th seq
  local retention = math.ceil(max(longest, 60000)) + 60000
  local newInstance = not reading and rcall('ZADD', KEYS[3], now, instance) == 1
  if newInstance or (not reading and seq % 16 == 0) then
    local gone = rcall('ZRANGEBYSCORE', KEYS[3], '-inf', now - retention, 'LIMIT', 0, 32)
    if #gone > 0 then
      rcall('ZREM', KEYS[3], unpack(gone))
      rcall('HDEL', KEYS[2], unpack(gone))
    end
    rcall('PEXPIRE', KEYS[2], retention)
    rcall('PEXPIRE', KEYS[3], retention)
  end
  local instances = rcall('ZCOUNT', KEYS[3], now - ACTIVE_MS, '+inf')
  reply[8] = instances
  -- in requests over one DEMAND_TAU_MS
  local pseudo = slowest * DEMAND_TAU_MS * PSEUDO_DEMAND / max(instances, 1)

  local INSTANCE_FIELD = 'i:' .. instance

  for i = 4, #KEYS do
    local key = KEYS[i]
    local entry = ARGV[i + 2]
    local offered, want, usages, refunds = sunpack('<dddd', entry)
    local meta = rcall('HMGET', key, 'L', 'h', INSTANCE_FIELD)
    local writeLayout = meta[1] ~= layout
    local stored, converted = nil, false
    slots, slotsKey = false, key
    if not writeLayout then
      if meta[2] and #meta[2] == HEADER * 8 then
        stored = { sunpack(HEADER_FORMAT, meta[2]) }
        slots = nil -- read when needed
      end
    elseif meta[1] == previousLayout then
      -- stored as b3: the same counts, read from its blob (written as b4 below; a read converts nothing)
      local blob = rcall('HGET', key, 'b')
      if blob and #blob == B3_HEADER * 8 + RING_BYTES then
        local old = { sunpack(B3_FORMAT, blob) }
        slots = string.sub(blob, B3_HEADER * 8 + 1)
        stored = { old[1], old[2], old[3] }
        for r = 1, RINGS do
          local ring, c = ringList[r], old[3 + r]
          local slot = function(bucket)
            return (sunpack(SLOT, slots, ring.base + (bucket % ring.size) * SLOT_BYTES + 1))
          end
          stored[1 + 3 * r], stored[2 + 3 * r], stored[3 + 3 * r] = c, slot(c), slot(c - 1)
        end
        for j = 1, #windows do stored[3 + 3 * RINGS + j] = old[3 + RINGS + j] end
      end
    elseif meta[1] then
      -- another layout (a rule's window, lease or mode changed, or a newer script's buckets): each window's
      -- count is carried over, never dropped (a strict key that started again would over-admit). b4 keeps
      -- its header in 'h'; b3, the format before it, at the start of its blob 'b'
      local header = meta[2]
      if string.sub(meta[1], 1, 3) == 'b3|' then
        local blob = rcall('HGET', key, 'b')
        header = blob and string.sub(blob, 1, 8 * b3HeaderDoubles(meta[1]))
      elseif string.sub(meta[1], 1, 3) ~= 'b4|' then
        header = nil
      end
      stored = header and carriedOver(meta[1], header, windows) or nil
      converted = stored ~= nil
      if not stored then
        -- unreadable: the key starts again
        if not reading then rcall('DEL', key) end
        meta = {}
      end
    end
    if stored then
      for j = 1, #windows do windows[j].sum = stored[SUMS_AT + j] end
    else
      for j = 1, #windows do windows[j].sum = 0 end
    end
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
    local instanceStored = meta[3]
    if instanceStored and #instanceStored == 40 then
      ownStored, ownAtStored, grantSeq, grantAt, credit = sunpack(INSTANCE_FORMAT, instanceStored)
    end

    -- approximate: this instance's previous allowance was reserved when granted; the usage reported now
    -- is charged to that reservation (it counts from the grant, the window's one extra bucket covering
    -- the interval in which it was spent), what it did not use goes back, and usage beyond it (admitted
    -- under a fallback) counts at its own epochs
    if applied and not strict then
      local left = credit
      for u = 0, usages - 1 do
        local at, count = sunpack(PAIR_FORMAT, entry, 33 + 16 * u)
        local take = min(left, count)
        left = left - take
        if count > take then add('a', at, count - take) end
      end
      -- a report that comes long after the grant (a key quiet for a while, a late timer) carries usage that
      -- may have been spent just before it: counted from the grant it left the windows that long early, and
      -- the store granted it again (an instance that held its allowance idle, then spent it, over-admitted
      -- by that much). It counts from SETTLE_LAG_MS before the report at the latest, never before the grant
      -- (from the key's time, as a grant: a reporter whose clock is behind the key's cannot age it early)
      local charged, late = credit - left, grantTime() - SETTLE_LAG_MS
      if charged > 0 and late > grantAt then
        add('a', grantAt, -charged)
        add('a', late, charged)
      end
      if left > 0 then add('a', grantAt, -left) end
    end
    -- strict: refunds leave the grant's bucket; tokens reported spent ([grantedAt, count] in `usage`) too,
    -- and count over W from their stamp instead: now - spentAgo (0 when the entry has none), which the
    -- instance measured from before it sent the request, so never before the spend on this clock (now is
    -- read after the request was sent). Spent before the stamp, they are in no window starting after it - W
    if applied and strict then
      for u = usages, usages + refunds - 1 do
        local at, count = sunpack(PAIR_FORMAT, entry, 33 + 16 * u)
        add('g', at, -count)
      end
      local agesAt = #entry > 32 + 16 * (usages + refunds) and 33 + 16 * (usages + refunds) or nil
      for u = 0, usages - 1 do
        local at, count = sunpack(PAIR_FORMAT, entry, 33 + 16 * u)
        at = min(at, now)
        local spentAt = now
        if agesAt then
          local ago = sunpack('<d', entry, agesAt + 8 * u)
          if ago > 0 then spentAt = max(now - ago, at) end
        end
        -- a limit whose window no longer counts the grant has no use for its tokens either
        for j = 1, #limits do
          local grants, spent = limits[j].parts[1], limits[j].parts[2]
          local bucket = min(floor(at / grants.ring.q), grants.ring.cur)
          if bucket > grants.ring.cur - grants.span then addTo(spent.ring, spentAt, count) end
        end
        add('g', at, -count)
      end
    end

    -- demand: the key's offered requests and this instance's, as counts decaying with DEMAND_TAU_MS;
    -- the instance's share is its part of the recent demand
    local demand, demandAt = 0, now
    if stored then demand, demandAt = decay(stored[1], stored[2]) end
    local own, ownAt = 0, now
    if ownStored then own, ownAt = decay(ownStored, ownAtStored) end
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
    local fair = share * max(remaining, tight.floor)
    local amount, denyUntil = 0, 0
    if strict then
      if applied and want > 0 and remaining > 0 then
        amount = min(want, remaining, math.ceil(fair))
        reserve(amount)
        remaining = remaining - amount
      end
    elseif applied then
      if remaining > 0 then
        amount = floor(min(remaining, 2 * share * remaining))
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
    if remaining <= 0 then
      -- nothing frees before the next bucket boundary of the tight limit's rings (strict: its spent tokens')
      local ring = tight.first.ring
      denyUntil = (ring.cur + 1) * ring.q
      if tight.second then
        ring = tight.second.ring
        denyUntil = min(denyUntil, (ring.cur + 1) * ring.q)
      end
    end

    local expiresMark = stored and stored[3] or nil
    -- a key carried over from another layout takes this one's TTL at once (a longer window's counts must
    -- not expire with the old layout's shorter TTL)
    local refresh = not expiresMark or converted or now - expiresMark >= 1000
    local added = 0
    if not reading then
      head[1], head[2], head[3] = demand, demandAt, refresh and now or expiresMark
      local dirty = false
      for r = 1, RINGS do
        local ring = ringList[r]
        head[1 + 3 * r], head[2 + 3 * r], head[3 + 3 * r] = ring.cur, ring.hot0, ring.hot1
        dirty = dirty or ring.dirty
      end
      for j = 1, #windows do head[SUMS_AT + j] = windows[j].sum end
      local header = spack(HEADER_FORMAT, unpack(head, 1, HEADER))
      local instanceValue = spack(INSTANCE_FORMAT, own, ownAt, grantSeq, grantAt, credit)
      if writeLayout then
        rcall('HSET', key, 'h', header, 'r', ringBytes(), INSTANCE_FIELD, instanceValue, 'L', layout)
        if meta[1] and string.sub(meta[1], 1, 3) == 'b3|' then rcall('HDEL', key, 'b') end
      elseif dirty then
        rcall('HSET', key, 'h', header, 'r', ringBytes(), INSTANCE_FIELD, instanceValue)
      else
        rcall('HSET', key, 'h', header, INSTANCE_FIELD, instanceValue)
      end
      if not instanceStored then added = 1 end
      if refresh then rcall('PEXPIRE', key, KEY_TTL) end
    end
    -- an instance new to the key: when the key holds many more instances than sync the group lately, the
    -- fields of those silent for longer than the seq records are kept go (their grants left every window)
    if added > 0 and rcall('HLEN', key) > 2 * instances + 10 then
      local all = rcall('HGETALL', key)
      local gone = {}
      for f = 1, #all, 2 do
        if string.sub(all[f], 1, 2) == 'i:' and (sunpack('<d', all[f + 1], 9)) < now - retention then
          gone[#gone + 1] = all[f]
        end
      end
      -- in slices: unpack() of more than ~8,000 values fails (Lua's C stack), and it would fail after this
      -- call had recorded its seq and written its keys
      for from = 1, #gone, UNPACK_SLICE do rcall('HDEL', key, unpack(gone, from, min(from + UNPACK_SLICE - 1, #gone))) end
    end

    reply[n + 1], reply[n + 2], reply[n + 3] = amount, now + lease, denyUntil
    reply[n + 4] = (tight.first.ring.cur + tight.first.span) * tight.q
    n = n + 4
    for j = 1, #limits do
      n = n + 1
      reply[n] = limitSum(limits[j])
    end
  end
  return reply
end
