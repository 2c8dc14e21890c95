--[[ sliding-window.lua: the sliding window counter (seed 002): epoch-aligned windows, the previous one
weighted by how much of it still overlaps the rolling window.
Defines ALGORITHMS['sliding-window'] (see limit-common.lua).
State   KEYS[i] = struct "<dddd": the open window's start and end (ms), the previous window's count, its own
Params  p1 max, p2 windowMs
Allowed previous * (end - t) / (end - start) + current + cost <= max, with t = max(now, start), compared
        exactly in integers: previous * (end - t) <= (max - current - cost) * (end - start)
Replay  a request dated before the end of the stored window is decided in that window at t = max(now, start)
        (a backfill: at its start, where the previous window weighs fully) and counted in it. The stored
        window only moves forward.
Change  a new windowMs applies from the end of the stored window; the next window starts at its
        epoch-aligned start or at that end, whichever is later, and has the stored count as its previous
        when it starts right at that end.
Result  allowed, limit, remaining if charged, remaining now (floors), resetAt (when everything counted
        has aged out: the end of the next window while this one counts, else the end of this one),
        retryAfterMs, commit ]]
-- Exact products of non-negative integers below 2^72 as six limbs of 24 bits (each partial product and
-- column sum stays below 2^53): previous * (end - t) passes 2^53 at max 1e9 and a window of a day.
local LIMB = 16777216
local function limbsOf(x)
  local l0 = x % LIMB
  x = (x - l0) / LIMB
  local l1 = x % LIMB
  return { l0, l1, (x - l1) / LIMB }
end
local function productLimbs(a, b)
  local x, y, r = limbsOf(a), limbsOf(b), { 0, 0, 0, 0, 0, 0 }
  for i = 1, 3 do
    for j = 1, 3 do r[i + j - 1] = r[i + j - 1] + x[i] * y[j] end
  end
  for i = 1, 5 do
    local carry = math.floor(r[i] / LIMB)
    r[i], r[i + 1] = r[i] - carry * LIMB, r[i + 1] + carry
  end
  return r
end
-- 2^53: a double product below it is the exact product (rounding is monotone, so a true product at or past
-- it never rounds below it)
local EXACT = 9007199254740992
-- a * b <= c * d, exactly: in doubles when both products are below 2^53 (nearly every call: the limbs
-- are only for large max times long windows), else in limbs
local function productAtMost(a, b, c, d)
  local ab, cd = a * b, c * d
  if ab < EXACT and cd < EXACT then return ab <= cd end
  local x, y = productLimbs(a, b), productLimbs(c, d)
  for i = 6, 1, -1 do
    if x[i] ~= y[i] then return x[i] < y[i] end
  end
  return true
end
-- ceil(a * b / d) and floor(a * b / d), exactly, for results below 2^52: the float quotient is off by at
-- most a unit or two, corrected against the exact products
local function ceilProductOver(a, b, d)
  local q = math.ceil(a * b / d)
  while q > 0 and productAtMost(a, b, q - 1, d) do q = q - 1 end
  while not productAtMost(a, b, q, d) do q = q + 1 end
  return q
end
local function floorProductOver(a, b, d)
  local q = math.floor(a * b / d)
  while q > 0 and not productAtMost(q, d, a, b) do q = q - 1 end
  while productAtMost(q + 1, d, a, b) do q = q + 1 end
  return q
end

ALGORITHMS['sliding-window'] = function(key, now, cost, p1, p2)
  local max, window = tonumber(p1), tonumber(p2)
  local start = now - now % window
  local stop, previous, current, open = start + window, 0, 0, false
  local state = redis.call('GET', key)
  if state then
    local s, e, p, c = struct.unpack('<dddd', state)
    if now < e then
      start, stop, previous, current, open = s, e, p, c, true
    elseif e >= start then
      -- the stored window ended where this one starts (or, after a change of windowMs, inside it: then this
      -- one starts there): it is the previous window
      start, previous = e, c
    end
  end
  local length = stop - start
  local t = math.max(now, start)
  -- in integers: weighted + current + cost <= max exactly when the fractional sum is, and floor(max - used)
  -- is max - used with used = weighted + current
  local weighted = ceilProductOver(previous, stop - t, length)
  local used = weighted + current
  local nextStop = stop - stop % window + window
  if used + cost <= max then
    local resetAt = now
    if current + cost > 0 then resetAt = nextStop elseif previous > 0 then resetAt = stop end
    return true, max, max - used - cost, max - used, resetAt, 0, function()
      if cost == 0 then return end
      -- the stored window keeps the lifetime it was given when it opened
      local value = struct.pack('<dddd', start, stop, previous, current + cost)
      if open then rewrite(key, value) else persist(key, value, nextStop, 2 * window) end
    end
  end
  local retryAt
  if current + cost <= max then
    -- in this window, once previous * (stop - t') / length <= max - current - cost
    -- (previous > 0 here: the request was refused with current + cost <= max)
    retryAt = stop - floorProductOver(max - current - cost, length, previous)
  else
    -- in the next window, where this window's count is the previous one and nothing is current yet
    local nextLength = nextStop - stop
    retryAt = stop + ceilProductOver(nextLength, current + cost - max, current)
  end
  local left = math.max(0, max - used)
  local resetAt = stop
  if current > 0 then resetAt = nextStop end
  return false, max, left, left, resetAt, math.max(1, retryAt - now)
end
