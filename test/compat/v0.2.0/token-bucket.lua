--[[ token-bucket.lua: Smyte's token bucket (seed 003): step refills, optional strict mode.
Defines ALGORITHMS['token-bucket'] (see limit-common.lua).
State   KEYS[i] = struct "<ddd": tokens, refill clock (ms), the max they were counted against (missing: a
        full bucket)
Params  p1 max, p2 refillAmount, p3 refillEveryMs, p4 strict (1: a request made while the bucket cannot
        pay restarts the refill clock, so a client that keeps hammering stays blocked until it is quiet
        for a whole refill period)
Allowed tokens after the whole refill periods up to now >= cost
Replay  the refill clock never moves back: a request dated before it gets no refill and is decided and
        charged against the tokens as they are.
Change  a new max shifts the tokens by its difference (gubernator: 100 -> 10 with 98 left leaves 8), within
        0..max; a new refillAmount or refillEveryMs applies from the refill clock on.
Result  allowed, limit (max), remaining if charged, remaining now, resetAt (full again), retryAfterMs,
        commit, onDeny ]]
-- when a bucket of `t` tokens with refill clock `l` is full again (at the chunk's level, not a closure per call)
local function fullAt(t, l, max, amount, every, now)
  if t >= max then return math.max(now, l) end
  return l + math.ceil((max - t) / amount) * every
end

ALGORITHMS['token-bucket'] = function(key, now, cost, p1, p2, p3, p4)
  local max, amount, every, strict = tonumber(p1), tonumber(p2), tonumber(p3), p4 == '1'
  local tokens, last = max, now
  local state = redis.call('GET', key)
  if state then
    local t, l, m = struct.unpack('<ddd', state)
    tokens = math.max(0, math.min(max, t + max - m))
    last = l
    if now > last then
      if tokens < max then
        -- step refills: whole periods only; the remainder of a period is kept
        local periods = math.floor((now - last) / every)
        if periods >= math.ceil((max - tokens) / amount) then
          tokens = max
        elseif periods > 0 then
          tokens = tokens + periods * amount
          last = last + periods * every
        end
      end
      -- a full bucket does not bank time towards its next refill
      if tokens == max then last = now end
    end
  end
  -- from empty to full
  local span = math.ceil(max / amount) * every
  if tokens >= cost then
    local left = tokens - cost
    return true, max, left, tokens, fullAt(left, last, max, amount, every, now), 0, function()
      if cost > 0 then persist(key, struct.pack('<ddd', left, last, max), fullAt(left, last, max, amount, every, now), span) end
    end
  end
  local restart = last
  if strict and now > last then restart = now end
  local retryAt = restart + math.ceil((cost - tokens) / amount) * every
  return false, max, tokens, tokens, fullAt(tokens, restart, max, amount, every, now), retryAt - now, nil, strict and function()
    persist(key, struct.pack('<ddd', tokens, restart, max), fullAt(tokens, restart, max, amount, every, now), span)
  end or nil
end
