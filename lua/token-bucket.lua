--[[ token-bucket.lua: Smyte's token bucket (seed 003): step refills, optional strict mode.
A part of the limits script (see limits.lua): defines ALGORITHMS['token-bucket'].
State   KEYS[i] = "tokens:lastRefillMs" (missing: a full bucket)
Params  p1 max, p2 refillAmount, p3 refillEveryMs, p4 strict (1: a request made while the bucket cannot
        pay restarts the refill clock, so a client that keeps hammering stays blocked until it is quiet
        for a whole refill period)
Result  allowed, limit (max), remaining if charged, remaining now, resetAt (full again), retryAfterMs,
        commit, onDeny ]]
ALGORITHMS['token-bucket'] = function(key, now, cost, p1, p2, p3, p4)
  local max, amount, every, strict = tonumber(p1), tonumber(p2), tonumber(p3), p4 == '1'
  local tokens, last = max, now
  local state = redis.call('GET', key)
  if state then
    local t, l = string.match(state, '^(%-?%d+):(%-?%d+)$')
    tokens, last = math.min(tonumber(t), max), tonumber(l)
  end
  if now > last then
    -- step refills: whole periods only; the remainder of a period is kept
    local periods = math.floor((now - last) / every)
    if periods > 0 then
      tokens = math.min(max, tokens + periods * amount)
      last = last + periods * every
    end
    if tokens == max then last = now end
  end
  local function fullAt(t, l)
    if t >= max then return now end
    return l + math.ceil((max - t) / amount) * every
  end
  local ttl = math.max(1, fullAt(tokens, last) - now + every)
  if tokens >= cost then
    local left = tokens - cost
    return true, max, left, tokens, fullAt(left, last), 0, function()
      if cost > 0 then redis.call('SET', key, left .. ':' .. last, 'PX', math.max(1, fullAt(left, last) - now + every)) end
    end
  end
  local restart = strict and now or last
  local retry = restart + math.ceil((cost - tokens) / amount) * every - now
  return false, max, tokens, tokens, fullAt(tokens, restart), math.max(1, retry), nil, strict and function()
    redis.call('SET', key, tokens .. ':' .. now, 'PX', ttl + every)
  end or nil
end
