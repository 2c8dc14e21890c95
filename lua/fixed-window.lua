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
Result  allowed, limit, remaining if charged, remaining now, resetAt (end of the window, or after a change of
        windowMs the first boundary of the new length at or after the stored end), retryAfterMs,
        commit when deferred ]]
-- writes the window after a charge: the stored window keeps the lifetime it was given when it opened
local function fixedWrite(key, stop, count, open, window)
  local value = struct.pack('<dd', stop, count)
  if open then rewrite(key, value) else persist(key, value, stop, window) end
end

ALGORITHMS['fixed-window'] = function(key, now, cost, max, window, _, _, deferred)
  local start = now - now % window
  local stop, count, open = start + window, 0, false
  -- when what the window counts is all back (its end, unless windowMs changed: below)
  local reset
  local state = redis.call('GET', key)
  if state then
    local e, c = struct.unpack('<dd', state)
    if now < e then
      stop, count, open = e, c, true
      -- windowMs changed to one the stored end is not a boundary of: the stored count still counts until the
      -- first boundary of the new length after it (resetAt, retryAfterMs), while the stored window keeps its end
      local past = e % window
      if past > 0 then reset = e - past + window end
    elseif e > start then
      -- windowMs grew: the stored window ended inside this one, whose requests it counted
      count = c
    end
  end
  reset = reset or stop
  if count + cost <= max then
    if deferred then
      return true, max, max - count - cost, max - count, reset, 0, function()
        if cost > 0 then fixedWrite(key, stop, count + cost, open, window) end
      end
    end
    if cost > 0 then fixedWrite(key, stop, count + cost, open, window) end
    return true, max, max - count - cost, max - count, reset, 0
  end
  -- cost <= max (the caller refuses more): the window after `reset` has room
  return false, max, math.max(0, max - count), math.max(0, max - count), reset, reset - now
end
