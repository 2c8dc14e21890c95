--[[ fixed-window.lua: a counter per epoch-aligned window.
A part of the limits script (see limits.lua): defines ALGORITHMS['fixed-window'].
State   KEYS[i] = "windowStartMs:count"
Params  p1 max, p2 windowMs
Allowed count in the current window + cost <= max
Result  allowed, limit, remaining if charged, remaining now, resetAt (end of the window), retryAfterMs,
        commit ]]
ALGORITHMS['fixed-window'] = function(key, now, cost, p1, p2)
  local max, window = tonumber(p1), tonumber(p2)
  local start = now - now % window
  local count = 0
  local state = redis.call('GET', key)
  if state then
    local s, c = string.match(state, '^(%-?%d+):(%d+)$')
    if tonumber(s) == start then count = tonumber(c) end
  end
  local resetAt = start + window
  if count + cost <= max then
    return true, max, max - count - cost, max - count, resetAt, 0, function()
      if cost > 0 then redis.call('SET', key, start .. ':' .. (count + cost), 'PX', math.max(1, resetAt - now)) end
    end
  end
  return false, max, max - count, max - count, resetAt, math.max(1, resetAt - now)
end
