--[[ gcra.lua: the generic cell rate algorithm with redis-cell's semantics (CL.THROTTLE), since
ElastiCache cannot load the redis-cell module.
A part of the limits script (see limits.lua): defines ALGORITHMS['gcra'].
State   KEYS[i] = theoretical arrival time (TAT), ms
Params  p1 burst, p2 count, p3 periodMs: `count` per `periodMs`, bursts of up to burst + 1
Allowed with T = period / count and tolerance = T * (burst + 1): max(TAT, now) + cost * T - tolerance <= now
Result  allowed, limit (burst + 1), remaining if charged, remaining now, resetAt (TAT: all capacity back),
        retryAfterMs, commit ]]
ALGORITHMS['gcra'] = function(key, now, cost, p1, p2, p3)
  local limit = tonumber(p1) + 1
  local interval = tonumber(p3) / tonumber(p2)
  local tolerance = interval * limit
  local tat = tonumber(redis.call('GET', key)) or now
  local base = math.max(tat, now)
  local newTat = base + cost * interval
  local allowAt = newTat - tolerance
  local remainingNow = math.max(0, math.floor((tolerance - (base - now)) / interval + 1e-9))
  if allowAt <= now then
    local remaining = math.floor((tolerance - (newTat - now)) / interval + 1e-9)
    return true, limit, remaining, remainingNow, math.ceil(newTat), 0, function()
      if cost > 0 then redis.call('SET', key, newTat, 'PX', math.max(1, math.ceil(newTat - now))) end
    end
  end
  return false, limit, remainingNow, remainingNow, math.ceil(base), math.max(1, math.ceil(allowAt - now))
end
