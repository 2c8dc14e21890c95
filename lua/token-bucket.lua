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
        commit and onDeny when deferred ]]
-- when a bucket of `t` tokens with refill clock `l` is full again (at the chunk's level, not a closure per call)
local function fullAt(t, l, max, amount, every, now)
  if t >= max then
    if l > now then return l end
    return now
  end
  return l + ceilOf((max - t) / amount) * every
end

ALGORITHMS['token-bucket'] = function(key, now, cost, max, amount, every, strictFlag, deferred)
  local strict = strictFlag == 1
  local tokens, last = max, now
  local state = redis.call('GET', key)
  if state then
    local t, l, m = struct.unpack('<ddd', state)
    tokens = t + max - m
    if tokens > max then tokens = max end
    if tokens < 0 then tokens = 0 end
    last = l
    if now > last then
      if tokens < max then
        -- step refills: whole periods only; the remainder of a period is kept
        local periods = floorOf((now - last) / every)
        if periods >= ceilOf((max - tokens) / amount) then
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
  local span = ceilOf(max / amount) * every
  if tokens >= cost then
    local left = tokens - cost
    local fullAgain = fullAt(left, last, max, amount, every, now)
    if deferred then
      return true, max, left, tokens, fullAgain, 0, function()
        if cost > 0 then persist(key, struct.pack('<ddd', left, last, max), fullAgain, span) end
      end
    end
    if cost > 0 then persist(key, struct.pack('<ddd', left, last, max), fullAgain, span) end
    return true, max, left, tokens, fullAgain, 0
  end
  local restart = last
  if strict and now > last then restart = now end
  local retryAt = restart + ceilOf((cost - tokens) / amount) * every
  local fullAgain = fullAt(tokens, restart, max, amount, every, now)
  if not strict then return false, max, tokens, tokens, fullAgain, retryAt - now end
  if deferred then
    return false, max, tokens, tokens, fullAgain, retryAt - now, nil, function()
      persist(key, struct.pack('<ddd', tokens, restart, max), fullAgain, span)
    end
  end
  persist(key, struct.pack('<ddd', tokens, restart, max), fullAgain, span)
  return false, max, tokens, tokens, fullAgain, retryAt - now
end
