--[[ limit.lua: one rate limit (POST /v1/limit). Loaded after limit-common.lua and exactly one algorithm
file, so a call defines only the algorithm it runs.
KEYS[1]    the limit's state
KEYS[2]    optional: the epoch key of its slot (storeLost() in limit-common.lua): missing, the call answers
           "STORELOST <KEYS[2]>" and counts nothing
ARGV[1]    struct "<ddddddd": now (ms since the epoch: the request's `at`, or the clock), cost (0 peeks:
           decides, changes nothing), p1..p4 of the algorithm (see its file; unused ones 0), then clock (the
           function's clock, ms: what key lifetimes are counted by, see limit-common.lua). Numbers travel packed: parsing decimal text
           (tonumber) cost more than the rest of a fixed window's call.
Reply      struct "<ddddd": allowed (1/0), limit, remaining, resetAt, retryAfterMs, integers (a packed string:
           an array reply is a table built here and inspected again by Redis). On a denial nothing is
           charged and remaining is what is left now; a strict token bucket still restarts its refill clock.
The chunk returns the call as a function of (KEYS, ARGV): run as a Redis Function, everything above it is
defined once per node, not once per call. ]]
return function(KEYS, ARGV)
  -- looked up per call: a Redis Function's chunk runs where `next` (any library global) does not exist yet
  local _, algorithm = next(ALGORITHMS)
  local now, cost, p1, p2, p3, p4, clock = struct.unpack('<ddddddd', ARGV[1])
  beginCall(now, clock)
  local lost = storeLost(KEYS[2])
  if lost then return lost end
  -- the algorithm writes its verdict itself (not deferred): a denial charges nothing
  local allowed, limit, remaining, remainingNow, resetAt, retry = algorithm(KEYS[1], now, cost, p1, p2, p3, p4)
  if allowed then return struct.pack('<ddddd', 1, limit, reply(remaining), reply(resetAt), 0) end
  return struct.pack('<ddddd', 0, limit, reply(remainingNow), reply(resetAt), retryReply(retry, now))
end
