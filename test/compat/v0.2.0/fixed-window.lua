--[[ fixed-window.lua: a counter per epoch-aligned window.
Defines ALGORITHMS['fixed-window'] (see limit-common.lua).
State   KEYS[i] = struct "<dd": window end (ms), count
Params  p1 max, p2 windowMs
Allowed count in the request's window + cost <= max
Replay  a request dated before the end of the stored window is counted in the stored window (the past one
        is gone; counting it in a newer one can only make later requests stricter). The stored window only
        moves forward.
Change  a new windowMs applies from the end of the stored window: that window keeps its end and its count;
        the next window is epoch-aligned to the new length, starting no earlier than the stored end: until
        the first boundary of the new length at or after that end, the stored count still counts (so the
        epoch-aligned window of the new length holding the stored end never counts more than max).
Result  allowed, limit, remaining if charged, remaining now, resetAt (end of the window), retryAfterMs,
        commit ]]
ALGORITHMS['fixed-window'] = function(key, now, cost, p1, p2)
  local max, window = tonumber(p1), tonumber(p2)
  local start = now - now % window
  local stop, count, open = start + window, 0, false
  local state = redis.call('GET', key)
  if state then
    local e, c = struct.unpack('<dd', state)
    if now < e then
      stop, count, open = e, c, true
    elseif e > start then
      -- windowMs grew: the stored window ended inside this one, whose requests it counted
      count = c
    end
  end
  if count + cost <= max then
    return true, max, max - count - cost, max - count, stop, 0, function()
      if cost == 0 then return end
      -- the stored window keeps the lifetime it was given when it opened
      local value = struct.pack('<dd', stop, count + cost)
      if open then rewrite(key, value) else persist(key, value, stop, window) end
    end
  end
  -- cost <= max (the caller refuses more): the next window has room
  return false, max, math.max(0, max - count), math.max(0, max - count), stop, stop - now
end
