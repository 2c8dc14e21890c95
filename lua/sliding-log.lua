--[[ sliding-log.lua: the exact sliding log: every charged unit in (now - window, now] counts.
A part of the limits script (see limits.lua): defines ALGORITHMS['sliding-log'].
State   KEYS[i] = sorted set, score = time ms, member = "time:cost:n" (n makes members unique)
Params  p1 max, p2 windowMs
Allowed sum of costs in (now - window, now] + cost <= max
Result  allowed, limit, remaining if charged, remaining now, resetAt (when everything counted has aged
        out), retryAfterMs, commit ]]
ALGORITHMS['sliding-log'] = function(key, now, cost, p1, p2)
  local max, window = tonumber(p1), tonumber(p2)
  local entries = redis.call('ZRANGEBYSCORE', key, '(' .. (now - window), now, 'WITHSCORES')
  local used, times, costs = 0, {}, {}
  for i = 1, #entries, 2 do
    local c = tonumber(string.match(entries[i], '^%-?%d+:(%d+):'))
    used = used + c
    times[#times + 1] = tonumber(entries[i + 1])
    costs[#costs + 1] = c
  end
  local resetAt = #times > 0 and times[#times] + window or now
  if used + cost <= max then
    return true, max, max - used - cost, max - used, cost > 0 and now + window or resetAt, 0, function()
      if cost == 0 then return end
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
      local n, member = 0, nil
      repeat
        n = n + 1
        member = now .. ':' .. cost .. ':' .. n
      until not redis.call('ZSCORE', key, member)
      redis.call('ZADD', key, now, member)
      redis.call('PEXPIRE', key, window)
    end
  end
  -- the oldest sends age out one by one: wait until enough have gone
  local retryAt = now + window
  local freed = 0
  for i = 1, #times do
    freed = freed + costs[i]
    if used - freed + cost <= max then
      retryAt = times[i] + window
      break
    end
  end
  return false, max, math.max(0, max - used), math.max(0, max - used), resetAt, math.max(1, retryAt - now)
end
