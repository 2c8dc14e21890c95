--[[ limit.lua: one rate limit (POST /v1/limit). Loaded after limit-common.lua and exactly one algorithm
file, so a call defines only the algorithm it runs.
KEYS[1]    the limit's state
ARGV[1]    now, ms since the epoch
ARGV[2]    cost (0 peeks: decides, changes nothing)
ARGV[3..6] p1..p4 of the algorithm (see its file; unused ones empty or left out)
Reply      { allowed (1/0), limit, remaining, resetAt, retryAfterMs } as integers. On a denial nothing is
           charged and remaining is what is left now; a strict token bucket still restarts its refill clock.
The chunk returns the call as a function of (KEYS, ARGV): run as a Redis Function, everything above it is
defined once per node, not once per call. ]]
return function(KEYS, ARGV)
  beginCall()
  -- looked up per call: a Redis Function's chunk runs where `next` (any library global) does not exist yet
  local _, algorithm = next(ALGORITHMS)
  local allowed, limit, remaining, remainingNow, resetAt, retry, commit, onDeny =
    algorithm(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6])
  if allowed then
    commit()
    return { 1, limit, reply(remaining), reply(resetAt), 0 }
  end
  if onDeny then onDeny() end
  return { 0, limit, reply(remainingNow), reply(resetAt), reply(retry) }
end
