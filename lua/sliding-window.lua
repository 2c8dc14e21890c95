--[[ sliding-window.lua: the sliding window counter (seed 002): epoch-aligned windows, the previous one
weighted by how much of it still overlaps the rolling window.
A part of the limits script (see limits.lua): defines ALGORITHMS['sliding-window'].
State   KEYS[i] = "windowStartMs:previous:current"
Params  p1 max, p2 windowMs
Allowed previous * (1 - elapsed / window) + current + cost <= max
Result  allowed, limit, remaining if charged, remaining now (floors), resetAt (end of the current window),
        retryAfterMs, commit ]]
ALGORITHMS['sliding-window'] = function(key, now, cost, p1, p2)
  local max, window = tonumber(p1), tonumber(p2)
  local start = now - now % window
  local previous, current = 0, 0
  local state = redis.call('GET', key)
  if state then
    local s, p, c = string.match(state, '^(%-?%d+):(%d+):(%d+)$')
    s, p, c = tonumber(s), tonumber(p), tonumber(c)
    if s == start then
      previous, current = p, c
    elseif s == start - window then
      previous = c
    end
  end
  local weight = 1 - (now - start) / window
  local used = previous * weight + current
  local resetAt = start + window
  if used + cost <= max then
    return true, max, math.max(0, math.floor(max - used - cost)), math.max(0, math.floor(max - used)), resetAt, 0, function()
      if cost > 0 then
        redis.call('SET', key, start .. ':' .. previous .. ':' .. (current + cost), 'PX', 2 * window)
      end
    end
  end
  -- when will previous * weight(t) + current + cost fit? (the tolerance keeps float error from adding 1 ms)
  local function up(x) return math.ceil(x - 1e-6) end
  local retryAt
  if current + cost <= max and previous > 0 then
    retryAt = start + up(window * (1 - (max - current - cost) / previous))
  elseif cost <= max then
    -- not in this window: in the next one, this window's count is the weighted previous
    if current > 0 and current > max - cost then
      retryAt = resetAt + up(window * (1 - (max - cost) / current))
    else
      retryAt = resetAt
    end
  else
    retryAt = resetAt + window
  end
  local left = math.max(0, math.floor(max - used))
  return false, max, left, left, resetAt, math.max(1, retryAt - now)
end
