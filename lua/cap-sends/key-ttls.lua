-- The TTL a key needs for sends kept `retention` after now, the send at `at` included.

local function ttlFor(retention)
  return retention + math.min(FUTURE_BOUND_MS, math.max(0, at - call.now))
end
local function extendTtl(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
-- The identity table's TTL is extended by an eighth more than needed: every call that writes a block or a record
-- needs it to outlive them, and with the clock moving a call would otherwise rewrite it (a replicated PEXPIRE)
-- every time; so only a call an eighth of the retention later does. Its identities and markers outlive what
-- uses them by that much at most.
local function extendTableTtl(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl + floor(ttl / 8)) end
end
