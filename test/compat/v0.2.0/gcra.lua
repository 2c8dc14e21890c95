--[[ gcra.lua: the generic cell rate algorithm with redis-cell's results (CL.THROTTLE), since ElastiCache
cannot load the redis-cell module. Like redis-cell it works in integer nanoseconds; a time is kept as whole
ms plus a ns remainder (0..999999), so every sum and comparison stays exact in Lua's doubles. One
deliberate difference: remaining is counted in whole ns (see left()).
Defines ALGORITHMS['gcra'] (see limit-common.lua).
State   KEYS[i] = struct "<dd": the theoretical arrival time (TAT), whole ms and ns remainder
Params  p1 burst, p2 count, p3 periodMs: `count` per `periodMs`, bursts of up to burst + 1. The emission
        interval T = trunc(periodMs * 1e6 / count) ns (redis-cell's float division), tolerance = T * (burst + 1).
        The caller keeps T >= 1 us and the tolerance <= 10 years.
Allowed max(TAT, now) + cost * T - tolerance <= now
Replay  the TAT never moves back: a request dated before it is decided against it (stricter than live).
Change  the TAT is kept, so the time until all capacity is back carries over and is re-read at the new rate
        (as redis-cell does for a key called with other parameters).
Result  allowed, limit (burst + 1), remaining if charged, remaining now, resetAt (the TAT: all capacity
        back), retryAfterMs, commit ]]
-- Helpers at the chunk's level, not closures made per call (a Redis Function defines them once per node;
-- its chunk runs where no library global, math included, exists yet: they are read inside the functions).
local E6 = 1000000

-- the interval (iMs, iNs) times n as (ms, ns)
local function gcraIntervals(iMs, iNs, n)
  local ns = iNs * n
  local carry = math.floor(ns / E6)
  return iMs * n + carry, ns - carry * E6
end

-- (ms, ns) with ns brought back into 0..999999 after one addition or subtraction
local function gcraNorm(ms, ns)
  if ns < 0 then return ms - 1, ns + E6 end
  if ns >= E6 then return ms + 1, ns - E6 end
  return ms, ns
end

local function gcraCeilMs(ms, ns)
  if ns > 0 then return ms + 1 end
  return ms
end

-- k intervals fit in (nMs, nNs)
local function gcraFits(iMs, iNs, k, nMs, nNs)
  local kMs, kNs = gcraIntervals(iMs, iNs, k)
  return kMs < nMs or (kMs == nMs and kNs <= nNs)
end

-- the capacity left at `now` when the TAT is (ms, ns): floor((tolerance - (TAT - now)) / T) in whole ns
-- (redis-cell truncates both to us first, which overstates it by one when T is not a whole number of us).
-- The double quotient is off by at most one; the exact products settle it.
local function gcraLeft(iMs, iNs, tolMs, tolNs, now, ms, ns)
  local nMs, nNs = gcraNorm(tolMs - (ms - now), tolNs - ns)
  if nMs < 0 or (nMs == 0 and nNs == 0) then return 0 end
  local q = math.floor((nMs * E6 + nNs) / (iMs * E6 + iNs))
  while q > 0 and not gcraFits(iMs, iNs, q, nMs, nNs) do q = q - 1 end
  while gcraFits(iMs, iNs, q + 1, nMs, nNs) do q = q + 1 end
  return q
end

ALGORITHMS['gcra'] = function(key, now, cost, p1, p2, p3)
  local limit = tonumber(p1) + 1
  local interval = math.floor(tonumber(p3) * E6 / tonumber(p2))
  local iNs = math.fmod(interval, E6)
  local iMs = (interval - iNs) / E6
  local tolMs, tolNs = gcraIntervals(iMs, iNs, limit)
  local tatMs, tatNs = now, 0
  local state = redis.call('GET', key)
  if state then tatMs, tatNs = struct.unpack('<dd', state) end
  local baseMs, baseNs = tatMs, tatNs
  if tatMs < now then baseMs, baseNs = now, 0 end
  local incMs, incNs = gcraIntervals(iMs, iNs, cost)
  local newMs, newNs = gcraNorm(baseMs + incMs, baseNs + incNs)
  -- allowed when newTat - tolerance <= now
  local aMs, aNs = gcraNorm(newMs - tolMs - now, newNs - tolNs)
  if aMs < 0 or (aMs == 0 and aNs == 0) then
    local resetAt = gcraCeilMs(newMs, newNs)
    return true, limit, gcraLeft(iMs, iNs, tolMs, tolNs, now, newMs, newNs),
      gcraLeft(iMs, iNs, tolMs, tolNs, now, baseMs, baseNs), resetAt, 0, function()
        if cost > 0 then persist(key, struct.pack('<dd', newMs, newNs), resetAt, tolMs + 1) end
      end
  end
  local remaining = gcraLeft(iMs, iNs, tolMs, tolNs, now, tatMs, tatNs)
  return false, limit, remaining, remaining, gcraCeilMs(tatMs, tatNs), gcraCeilMs(aMs, aNs)
end
