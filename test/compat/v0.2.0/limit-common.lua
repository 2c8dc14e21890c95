--[[ limit-common.lua: what every rate-limit script shares. The loader puts it first, then the algorithm
files (each defines ALGORITHMS[name]), then a driver: limit.lua (one limit, POST /v1/limit) or limits.lua
(several, all or nothing, POST /v1/limits). The whole is a chunk that returns the call's function (a Redis
Function's body): nothing defined here may keep state from one call to the next (beginCall resets it).

Every algorithm is a function (key, now, cost, p1, p2, p3, p4) that reads its state and returns
  allowed, limit, remaining if charged, remaining now, resetAt, retryAfterMs, commit[, onDeny]
without writing anything; the driver calls commit() (charge) or onDeny() (a strict token bucket's restart)
once the verdict of the whole call is known.

Time: `now` (ms, the request's `at` or the caller's clock) decides; a state never moves back in time (each
algorithm says how it answers a request dated before its state). Key lifetimes are counted from the
server's clock (TIME), never from `now` alone, and are clamped (see ttlOf).

States are packed with struct (little-endian doubles: integers are exact up to 2^53): formatting numbers
as text (%.14g) and matching them back cost more than the rest of a call. ]]
local ALGORITHMS = {}
-- 10 years: the longest any state is kept (a token bucket refilling 1 token a year may need longer)
local MAX_TTL_MS = 315360000000
-- replies are Redis integers read as JavaScript numbers: no time past the last one a JavaScript Date holds
-- (a token bucket of 1e9 tokens refilled one a year is full again in 3e19 ms)
local MAX_REPLY = 8640000000000000
-- the server's clock, ms: read (TIME) only when a lifetime is computed, at most once per call
local serverNow
-- What a driver does first in every call: the chunk's own state (run once as a Redis Function) is per call.
local function beginCall()
  serverNow = nil
end
local function serverClock()
  if serverNow == nil then
    local t = redis.call('TIME')
    serverNow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return serverNow
end

-- A replay (requests dated in the past) finds the state it wrote for at least this long, or one span of
-- the limit if that is shorter: a backfilled window does not vanish before the next backfill reads it.
local REPLAY_TTL_MS = 60000

-- How long a state must live by the server's clock: until `expiresAt` (request time), when no request can
-- read it any more, but at least min(span, REPLAY_TTL_MS) and at most MAX_TTL_MS.
local function ttlOf(expiresAt, span)
  local ttl = math.max(expiresAt - serverClock(), math.min(span, REPLAY_TTL_MS), 1)
  return math.min(ttl, MAX_TTL_MS)
end

local function persist(key, value, expiresAt, span)
  redis.call('SET', key, value, 'PX', ttlOf(expiresAt, span))
end

-- Rewrites a state whose lifetime is already right (the same window as when it was written).
local function rewrite(key, value)
  redis.call('SET', key, value, 'KEEPTTL')
end

local function reply(n)
  if n > MAX_REPLY then return MAX_REPLY end
  return n
end
