--[[ quota-sync.lua: one Quotas sync call (protocol 1; sdk/src/wire.ts is the contract and builds the arguments).
Applies an instance's usage and refunds for the keys of one slot group, once per (instance, seq), and
answers each key's allowance (approximate) or reserved tokens (strict).
KEYS[1]    <ns>:q:{<rule>.<group>}:cfg    hash { v = config version, r = encoded rule }
KEYS[2]    <ns>:q:{<rule>.<group>}:seq    hash instance -> "highestSeq:mask" (mask: the 32 seqs below it)
KEYS[3]    <ns>:q:{<rule>.<group>}:inst   sorted set instance -> last sync (ms)
KEYS[3+i]  <ns>:q:{<rule>.<group>}:k:<key_i>   key i's rings, window sums and demand
ARGV[1..5] protocol (1), now (ms), instanceId, seq, configVersion seen
ARGV[5+4*(i-1)+1 .. +4]  key i: usage "at:count,...", refunds "grantedAt:count,...", offered, want
Reply      { 1, status ("applied"|"duplicate"|"stale"|"norule"), now, configVersion, rule (encoded, or ""
           when the request saw this version), mode, windows, instances, then per key: amount
           (allowance | tokens), expiresAt (validUntil | leaseExpiresAt), denyUntil, resetAt, used per window }

Windows are rings of buckets with running sums, updated incrementally: a bucket is 50 ms for windows up
to 5 s and W/100 beyond, so a sum is read, never recomputed; windows with the same bucket size share a
ring. approximate reserves each allowance when it grants it (key field g:<instance> = seq:at:amount)
and settles it at that instance's next applied sync: the usage reported is charged to it (so counted
from the grant), the unused rest goes back, usage beyond it (admitted under a fallback) counts at its
epochs. So allowances handed out at different instants see each other; the windows sum reservations
and usage over the last W/bucket + 1 buckets (the extra bucket covers usage spent up to a bucket after
its grant; spent later, e.g. after a late reply, it leaves the window early: the approximate part).  strict sums grants over every bucket that touches (now - W - lease, now], so grants in
any W + lease stay <= max and used tokens in any W do too. ]]
local REORDER = 32
local ACTIVE_MS = 5000
local DEMAND_TAU_MS = 1000
-- every instance is credited a pseudo-demand of 1/8 of an even split of the limit's rate: idle
-- instances get an even share (and can admit their first request), busy ones a share close to their
-- demand, and the shares of all instances still add up to 1
local PSEUDO_DEMAND = 1 / 8

local now = tonumber(ARGV[2])
local instance, seq, seen = ARGV[3], tonumber(ARGV[4]), ARGV[5]

local cfg = redis.call('HMGET', KEYS[1], 'v', 'r')
local version, ruleText = cfg[1], cfg[2]
-- no configuration, or a removed rule's tombstone (lua/quota-rule.lua)
if not version or version == '' then return { 1, 'norule', now, '', '', '', 0, 0 } end
local reply = { 1, 'applied', now, version, version == seen and '' or ruleText }

-- the rule: mode|leaseMs|fallback|slotGroups|W:max,W:max
local mode, lease, limitsText = string.match(ruleText, '^(%a+)|(%d+)|%a+|%d+|(.+)$')
lease = tonumber(lease)
local strict = mode == 'strict'
local windows, rings, ringList = {}, {}, {}
local longest, slowest = 0, nil
for w, m in string.gmatch(limitsText, '(%d+):(%d+)') do
  w, m = tonumber(w), tonumber(m)
  local q = w <= 5000 and 50 or w / 100
  -- approximate: one bucket more than W, so the ring never misses the part of (now - W, now] that
  -- precedes its oldest bucket's start
  local span = strict and math.ceil((w + lease) / q) + 1 or w / q + 1
  local ring = rings[q]
  if not ring then
    ring = { q = q, size = 0, windows = {} }
    rings[q] = ring
    ringList[#ringList + 1] = ring
  end
  local window = { w = w, max = m, q = q, span = span, ring = ring }
  windows[#windows + 1] = window
  ring.windows[#ring.windows + 1] = window
  if span > ring.size then ring.size = span end
  if span * q > longest then longest = span * q end
  if slowest == nil or m / w < slowest then slowest = m / w end
end
reply[6], reply[7] = mode, #windows

-- a key's stored counts are kept across a change of max, dropped when the bucket layout changes
local layout = mode
for _, window in ipairs(windows) do layout = layout .. ',' .. window.w .. '/' .. window.span end
local fields = { 'L', 'd', 'dt', 'd:' .. instance, 't:' .. instance, 'x', 'g:' .. instance }
local GRANT = 7
local CURSORS = #fields
for _, ring in ipairs(ringList) do fields[#fields + 1] = 'c' .. ring.q end
local SUMS = #fields
for _, window in ipairs(windows) do fields[#fields + 1] = 's' .. window.w end

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
local applied = status == 'applied'
reply[2] = status
if applied then redis.call('HSET', KEYS[2], instance, high .. ':' .. mask) end

-- the seq and instance records outlive the longest window, so a replay they no longer know about only
-- carries usage too old to count; their expiry is pushed on for new members and every 16th seq
local retention = math.max(longest, 60000) + 60000
local newInstance = redis.call('ZADD', KEYS[3], now, instance) == 1
if newInstance or seq % 16 == 0 then
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
local pseudo = slowest * DEMAND_TAU_MS * PSEUDO_DEMAND / instances

local function decay(count, at)
  if not count then return 0, now end
  if now > at then return count * math.exp((at - now) / DEMAND_TAU_MS), now end
  return count, at
end

local function slotOf(ring, bucket)
  if bucket == ring.now then return ring.nowSlot end
  return ring.q .. ':' .. (bucket % ring.size)
end

-- Every key is read with one HMGET and written with one HSET in the usual case: the read also fetches
-- the current bucket and, per window, the bucket that leaves it when the ring moves on by one. Names
-- are built once per call, not per key (string building is most of a key's cost).
local KEY_TTL = longest + 2000
for _, ring in ipairs(ringList) do
  ring.now = math.floor(now / ring.q)
  ring.nowSlot = ring.q .. ':' .. (ring.now % ring.size)
  fields[#fields + 1] = ring.nowSlot
  ring.nowField = #fields
  for _, window in ipairs(ring.windows) do
    fields[#fields + 1] = slotOf(ring, ring.now - window.span)
    window.leavingField = #fields
  end
end
local write = { 'L', layout, 'd', 0, 'dt', 0, 'd:' .. instance, 0, 't:' .. instance, 0 }
local GRANT_FIELD = 'g:' .. instance
for _, ring in ipairs(ringList) do
  write[#write + 1] = 'c' .. ring.q
  write[#write + 1] = 0
  ring.writeAt = #write
end
for _, window in ipairs(windows) do
  write[#write + 1] = 's' .. window.w
  write[#write + 1] = 0
  window.writeAt = #write
end
local WRITE_FIXED = #write

-- the key being updated: writes for its final HSET (slot -> value); a `direct` ring (caller's clock
-- behind the ring) takes its writes as HINCRBY instead
local key, pending = nil, {}

-- adds count (a refund: negative, never taking a bucket below 0) to the bucket holding `at` in every
-- ring, and to the sums of the windows that bucket is in
local function add(at, count)
  if at > now then at = now end
  for _, ring in ipairs(ringList) do
    local c = ring.cur
    local bucket = math.floor(at / ring.q)
    if bucket > c then bucket = c end
    if bucket > c - ring.size then
      local name = slotOf(ring, bucket)
      local delta = count
      local value = pending[name]
      if value ~= nil then
        if value + delta < 0 then delta = -value end
        pending[name] = value + delta
      else
        value = redis.call('HINCRBY', key, name, delta)
        if value < 0 then
          redis.call('HINCRBY', key, name, -value)
          delta = delta - value
        end
      end
      for _, window in ipairs(ring.windows) do
        if bucket > c - window.span then window.sum = window.sum + delta end
      end
    end
  end
end

-- reserves `amount` in the ring's current bucket, not now's: a caller whose clock is behind cannot age
-- a grant early
local function reserve(amount)
  for _, ring in ipairs(ringList) do
    local name = slotOf(ring, ring.cur)
    if pending[name] ~= nil then
      pending[name] = pending[name] + amount
    else
      redis.call('HINCRBY', key, name, amount)
    end
    for _, window in ipairs(ring.windows) do window.sum = window.sum + amount end
  end
end

-- a time in the bucket every ring reserved in (the latest ring boundary, or now), for the refund
local function grantTime()
  local at = now
  for _, ring in ipairs(ringList) do
    if ring.cur * ring.q > at then at = ring.cur * ring.q end
  end
  return at
end

for i = 4, #KEYS do
  key = KEYS[i]
  for name in pairs(pending) do pending[name] = nil end
  local a = 5 + 4 * (i - 4)
  local usage, refunds, offered, want = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local meta = redis.call('HMGET', key, unpack(fields))
  if meta[1] and meta[1] ~= layout then
    redis.call('DEL', key)
    meta = {}
  end
  for j, window in ipairs(windows) do window.sum = tonumber(meta[SUMS + j]) or 0 end
  for r, ring in ipairs(ringList) do
    local c = ring.now
    local last = tonumber(meta[CURSORS + r])
    if not last then
      pending[ring.nowSlot] = 0
    elseif last == c then
      pending[ring.nowSlot] = tonumber(meta[ring.nowField]) or 0
    elseif last > c then
      c = last -- a caller whose clock is behind never rewinds the ring; it writes to the ring's bucket
    elseif c - last >= ring.size then
      local clear = {}
      for s = 0, ring.size - 1 do clear[#clear + 1] = ring.q .. ':' .. s end
      redis.call('HDEL', key, unpack(clear))
      for _, window in ipairs(ring.windows) do window.sum = 0 end
      pending[ring.nowSlot] = 0
    elseif c - last == 1 then
      for _, window in ipairs(ring.windows) do
        window.sum = window.sum - (tonumber(meta[window.leavingField]) or 0)
      end
      pending[ring.nowSlot] = 0
    else
      -- moved on by several buckets: those leaving each window (newer than `last`: never written)
      local names, owners = {}, {}
      for b = last + 1, c do
        for _, window in ipairs(ring.windows) do
          if b - window.span <= last then
            names[#names + 1] = slotOf(ring, b - window.span)
            owners[#owners + 1] = window
          end
        end
        pending[slotOf(ring, b)] = 0 -- reused slots start again from 0
      end
      if #names > 0 then
        local values = redis.call('HMGET', key, unpack(names))
        for j, window in ipairs(owners) do window.sum = window.sum - (tonumber(values[j]) or 0) end
      end
    end
    ring.cur = c
  end

  -- approximate: this instance's previous allowance was reserved when granted; the usage reported now
  -- is charged to that reservation (it counts from the grant, the window's one extra bucket covering
  -- the interval in which it was spent), what it did not use goes back, and usage beyond it (admitted
  -- under a fallback) counts at its own epochs
  local grantSeq, grantAt, credit = string.match(meta[GRANT] or '', '^(%d+):(%d+):(%d+)$')
  credit = tonumber(credit) or 0
  if applied and not strict then
    local left = credit
    for at, count in string.gmatch(usage, '(%d+):(%d+)') do
      count = tonumber(count)
      local take = math.min(left, count)
      left = left - take
      if count > take then add(tonumber(at), count - take) end
    end
    if left > 0 then add(tonumber(grantAt), -left) end
  end
  if applied and strict then
    for at, count in string.gmatch(refunds, '(%d+):(%d+)') do add(tonumber(at), -tonumber(count)) end
  end

  -- demand: the key's offered requests and this instance's, as counts decaying with DEMAND_TAU_MS;
  -- the instance's share is its part of the recent demand
  local demand, demandAt = decay(tonumber(meta[2]), tonumber(meta[3]))
  local own, ownAt = decay(tonumber(meta[4]), tonumber(meta[5]))
  if applied then
    demand, own = demand + offered, own + offered
  end
  local share = (own + pseudo) / (demand + instances * pseudo)
  if share > 1 then share = 1 end

  -- the tightest window decides
  local tight, remaining = nil, nil
  for _, window in ipairs(windows) do
    local left = window.max - window.sum
    if remaining == nil or left < remaining then tight, remaining = window, left end
  end
  local amount, denyUntil, grant = 0, 0, nil
  if strict then
    if applied and want > 0 and remaining > 0 then
      amount = math.min(want, remaining, math.ceil(remaining * share))
      reserve(amount)
      remaining = remaining - amount
    end
  elseif applied then
    if remaining > 0 then
      amount = math.floor(remaining * share)
      -- never more than about two intervals of what this instance was offered in its last one: a
      -- reservation it would not spend is capacity the other instances cannot have until its next sync
      if amount > 2 * offered + 1 then amount = 2 * offered + 1 end
      if amount == 0 and remaining >= instances then amount = 1 end
      reserve(amount) -- `remaining` stays as it was: denyUntil means nothing could be granted
    end
    grant = seq .. ':' .. grantTime() .. ':' .. amount
  elseif tonumber(grantSeq) == seq then
    amount = credit -- a retry of the sync that granted it: the same allowance again
  end
  if remaining <= 0 then denyUntil = (tight.ring.cur + 1) * tight.q end

  write[4], write[6], write[8], write[10] = demand, demandAt, own, ownAt
  for _, ring in ipairs(ringList) do write[ring.writeAt] = ring.cur end
  for _, window in ipairs(windows) do write[window.writeAt] = window.sum end
  local n = WRITE_FIXED
  if grant then
    write[n + 1], write[n + 2] = GRANT_FIELD, grant
    n = n + 2
  end
  local expiresMark = tonumber(meta[6])
  local refresh = not expiresMark or now - expiresMark >= 1000
  if refresh then
    write[n + 1], write[n + 2] = 'x', now
    n = n + 2
  end
  for name, value in pairs(pending) do
    write[n + 1], write[n + 2] = name, value
    n = n + 2
  end
  redis.call('HSET', key, unpack(write, 1, n))
  if refresh then redis.call('PEXPIRE', key, KEY_TTL) end

  reply[#reply + 1] = amount
  reply[#reply + 1] = now + lease
  reply[#reply + 1] = denyUntil
  reply[#reply + 1] = (tight.ring.cur + tight.span) * tight.q
  for _, window in ipairs(windows) do reply[#reply + 1] = window.sum end
end
return reply
