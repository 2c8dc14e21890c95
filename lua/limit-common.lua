--[[ limit-common.lua: what every rate-limit script shares. The loader puts it first, then the algorithm
files (each defines ALGORITHMS[name]), then a driver: limit.lua (one limit, POST /v1/limit) or limits.lua
(several, all or nothing, POST /v1/limits). The whole is a chunk that returns the call's function (a Redis
Function's body): nothing defined here may keep state from one call to the next (beginCall resets it).

Every algorithm is a function (key, now, cost, p1, p2, p3, p4, deferred), its arguments numbers, that reads
its state and returns
  allowed, limit, remaining if charged, remaining now, resetAt, retryAfterMs[, commit, onDeny]
Without `deferred` (one limit: its verdict is the call's) it writes at once: the charge when allowed, a
strict token bucket's restart when denied. With `deferred` (several limits, all or nothing) it writes
nothing and returns commit and onDeny, which the driver calls once the verdict of the whole call is known:
closures cost allocations (and the collector's time), so the one-limit path makes none.

Time: `now` (ms, the request's `at` or the caller's clock) decides; a state never moves back in time (each
algorithm says how it answers a request dated before its state). A key's lifetime is the state's span in the
request's own timeline, counted on the server side from the earliest of `now`, `clock` (the function's clock,
passed by the caller) and the Redis server's clock (TIME): a client whose clock lags (by up to the oldest `at`
the API accepts) keeps its state until its own clock has moved past it, and a client dated ahead of either
clock (by up to 5 minutes) keeps it until that clock has; a request's `at` never shortens a lifetime below
what the clocks need. Clamped (see ttlOf).

States are packed with struct (little-endian doubles: integers are exact up to 2^53): formatting numbers
as text (%.14g) and matching them back cost more than the rest of a call. ]]
local ALGORITHMS = {}
-- 10 years: the longest any state is kept (a token bucket refilling 1 token a year may need longer)
local MAX_TTL_MS = 315360000000
-- replies are Redis integers read as JavaScript numbers: no time past the last one a JavaScript Date holds
-- (a token bucket of 1e9 tokens refilled one a year is full again in 3e19 ms)
local MAX_REPLY = 8640000000000000
-- where a state's lifetime is counted from (ms): the earliest of the request's time, the function's clock and
-- (read once a lifetime is needed) the server's
local lifetimeFrom, serverRead
-- What a driver does first in every call, with the call's `now` and `clock`: the chunk's own state (run once
-- as a Redis Function) is per call.
local function beginCall(now, clock)
  lifetimeFrom, serverRead = now, false
  if clock < now then lifetimeFrom = clock end
end
-- TIME only when a lifetime is computed, at most once per call: a peek or a denial does not read it
local function readServerClock()
  serverRead = true
  local t = redis.call('TIME')
  -- arithmetic converts each string once (tonumber() parses its argument twice)
  local us = t[2] + 0
  local server = t[1] * 1000 + (us - us % 1000) / 1000
  if server < lifetimeFrom then lifetimeFrom = server end
end

-- A replay (requests dated in the past) finds the state it wrote for at least this long, or one span of
-- the limit if that is shorter: a backfilled window does not vanish before the next backfill reads it.
local REPLAY_TTL_MS = 60000

-- How long a state must live: until `expiresAt` (in the request's timeline), when no request of the same
-- client can read it any more, counted from lifetimeFrom: from the request's own time, since a lagging client
-- reads it until its own clock reaches `expiresAt`; from a clock the request is dated ahead of, since a client
-- on that clock reads it until then. At least min(span, REPLAY_TTL_MS), at most MAX_TTL_MS.
local function ttlOf(expiresAt, span)
  if not serverRead then readServerClock() end
  local ttl, least = expiresAt - lifetimeFrom, span
  if least > REPLAY_TTL_MS then least = REPLAY_TTL_MS end
  if ttl < least then ttl = least end
  if ttl < 1 then ttl = 1 end
  if ttl > MAX_TTL_MS then ttl = MAX_TTL_MS end
  return ttl
end

-- floor and ceiling by the VM's `%` (x % 1 is x - floor(x)): math.floor and math.ceil are a global looked
-- up and a C function called through Lua's API, several times the cost of the arithmetic
local function floorOf(x)
  return x - x % 1
end
local function ceilOf(x)
  local f = x - x % 1
  if f < x then return f + 1 end
  return f
end

local function persist(key, value, expiresAt, span)
  redis.call('SET', key, value, 'PX', ttlOf(expiresAt, span))
end

-- Rewrites a state whose lifetime is already right (the same window as when it was written).
local function rewrite(key, value)
  redis.call('SET', key, value, 'KEEPTTL')
end

-- The store epoch (sdk/src/protocol/keys-store-epoch.ts): `epochKey`, when the caller declares it, is the
-- epoch key of the call's slot, written when the store was initialised. Missing, the slot's state was lost
-- since: the error reply to answer (the call counts nothing), else nil.
local function storeLost(epochKey)
  if epochKey ~= nil and redis.call('EXISTS', epochKey) == 0 then
    return redis.error_reply('STORELOST ' .. epochKey)
  end
  return nil
end

local function reply(n)
  if n > MAX_REPLY then return MAX_REPLY end
  return n
end
-- a retry delay so that now + retry stays within MAX_REPLY, as a capped resetAt does (resetAt is never
-- before now + retryAfterMs, capped or not)
local function retryReply(retry, now)
  if now + retry > MAX_REPLY then return MAX_REPLY - now end
  return retry
end
