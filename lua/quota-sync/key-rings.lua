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
