--[[ sliding-window.lua: the sliding window counter (seed 002): epoch-aligned windows, the previous one
weighted by how much of it still overlaps the rolling window.
Defines ALGORITHMS['sliding-window'] (see limit-common.lua).
State   KEYS[i] = struct "<dddd": the open window's start and end (ms), the previous window's count, its own
Params  p1 max, p2 windowMs
Allowed previous * (end - t) / (end - start) + current + cost <= max, with t = max(now, start)
Replay  a request dated before the end of the stored window is decided in that window at t = max(now, start)
        (a backfill: at its start, where the previous window weighs fully) and counted in it. The stored
        window only moves forward.
Change  a new windowMs applies from the end of the stored window; the next window starts at its
        epoch-aligned start or at that end, whichever is later, and has the stored count as its previous
        when it starts right at that end.
Result  allowed, limit, remaining if charged, remaining now (floors), resetAt (when everything counted
        has aged out: the end of the next window while this one counts, else the end of this one),
        retryAfterMs, commit ]]
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
  -- (float: exact while previous * length < 2^53; the same expression in the reference model)
  local used = previous * (stop - t) / length + current
  local nextStop = stop - stop % window + window
  if used + cost <= max then
    local resetAt = now
    if current + cost > 0 then resetAt = nextStop elseif previous > 0 then resetAt = stop end
    return true, max, math.floor(max - used - cost), math.floor(max - used), resetAt, 0, function()
      if cost == 0 then return end
      -- the stored window keeps the lifetime it was given when it opened
      local value = struct.pack('<dddd', start, stop, previous, current + cost)
      if open then rewrite(key, value) else persist(key, value, nextStop, 2 * window) end
    end
  end
  local retryAt
  if current + cost <= max then
    -- in this window, once previous * (stop - t') / length <= max - current - cost
    retryAt = start + math.ceil(length * (previous - (max - current - cost)) / previous)
  else
    -- in the next window, where this window's count is the previous one and nothing is current yet
    local nextLength = nextStop - stop
    retryAt = stop + math.ceil(nextLength * (current + cost - max) / current)
  end
  local left = math.max(0, math.floor(max - used))
  local resetAt = stop
  if current > 0 then resetAt = nextStop end
  return false, max, left, left, resetAt, math.max(1, retryAt - now)
end
