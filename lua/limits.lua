--[[ limits.lua: checks several rate limits and charges them all or none, in one atomic call
(POST /v1/limits). Loaded after limit-common.lua and every algorithm file.
KEYS[i]    the state key of limit i (i = 1..n, n = #ARGV - 1); all keys of a call share one hash tag (the scope)
KEYS[n+1]  optional: the epoch key of their slot (storeLost() in limit-common.lua): missing, the call answers
           "STORELOST <KEYS[n+1]>" and counts nothing
ARGV[1]    struct-packed doubles: now (ms since the epoch), then per limit i its cost and p1..p4 (see each
           algorithm; unused ones 0), 5 doubles a limit, then clock (the function's clock, ms: what key
           lifetimes are counted by, see limit-common.lua) (see limit.lua on why numbers travel packed)
ARGV[1+i]  the algorithm of limit i
Reply      { allowed (1 when every limit allowed), then per limit: allowed (this limit alone), limit,
           remaining, resetAt, retryAfterMs } as integers. When any limit denies, none is charged and
           every remaining is what is left now; a strict token bucket that denied still restarts its
           refill clock.
The chunk returns the call as a function of (KEYS, ARGV) (see limit.lua). ]]
return function(KEYS, ARGV)
  local numbers, n = ARGV[1], #ARGV - 1
  local now = struct.unpack('<d', numbers)
  beginCall(now, (struct.unpack('<d', numbers, 9 + 40 * n)))
  local lost = storeLost(KEYS[n + 1])
  if lost then return lost end
  local results, commits, denies, nows = { 1 }, {}, {}, {}
  local all = true
  for i = 1, n do
    local algorithm = ALGORITHMS[ARGV[1 + i]]
    if algorithm == nil then return redis.error_reply('ERR limits: unknown algorithm ' .. tostring(ARGV[1 + i])) end
    local cost, p1, p2, p3, p4 = struct.unpack('<ddddd', numbers, 9 + 40 * (i - 1))
    -- deferred: each returns its commit (and a strict bucket its onDeny), called once every verdict is in
    local allowed, limit, remaining, remainingNow, resetAt, retry, commit, onDeny =
      algorithm(KEYS[i], now, cost, p1, p2, p3, p4, true)
    if not allowed then all = false end
    commits[i], denies[i], nows[i] = commit, (not allowed) and onDeny or nil, reply(remainingNow)
    local base = #results
    results[base + 1] = allowed and 1 or 0
    results[base + 2] = limit
    results[base + 3] = reply(remaining)
    results[base + 4] = reply(resetAt)
    results[base + 5] = retryReply(retry, now)
  end
  if all then
    for i = 1, n do commits[i]() end
  else
    results[1] = 0
    for i = 1, n do
      results[1 + 5 * (i - 1) + 3] = nows[i]
      if denies[i] then denies[i]() end
    end
  end
  return results
end
