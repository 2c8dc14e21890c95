--[[ limits.lua: checks several rate limits and charges them all or none, in one atomic call
(POST /v1/limits). Loaded after limit-common.lua and every algorithm file.
KEYS[i]    the state key of limit i; all keys of a call share one hash tag (the scope)
ARGV[1]    now, ms since the epoch
ARGV[1+6*(i-1)+1 .. +6]  limit i: algorithm, cost, p1, p2, p3, p4 (see each algorithm; unused = "")
Reply      { allowed (1 when every limit allowed), then per limit: allowed (this limit alone), limit,
           remaining, resetAt, retryAfterMs } as integers. When any limit denies, none is charged and
           every remaining is what is left now; a strict token bucket that denied still restarts its
           refill clock.
The chunk returns the call as a function of (KEYS, ARGV) (see limit.lua). ]]
return function(KEYS, ARGV)
  beginCall()
  local now = tonumber(ARGV[1])
  local results, commits, denies, nows = { 1 }, {}, {}, {}
  local all = true
  for i = 1, #KEYS do
    local a = 1 + 6 * (i - 1)
    local algorithm = ALGORITHMS[ARGV[a + 1]]
    if algorithm == nil then return redis.error_reply('ERR limits: unknown algorithm ' .. tostring(ARGV[a + 1])) end
    local allowed, limit, remaining, remainingNow, resetAt, retry, commit, onDeny =
      algorithm(KEYS[i], now, tonumber(ARGV[a + 2]), ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6])
    if not allowed then all = false end
    commits[i], denies[i], nows[i] = commit, (not allowed) and onDeny or nil, reply(remainingNow)
    local base = #results
    results[base + 1] = allowed and 1 or 0
    results[base + 2] = limit
    results[base + 3] = reply(remaining)
    results[base + 4] = reply(resetAt)
    results[base + 5] = reply(retry)
  end
  if all then
    for i = 1, #KEYS do commits[i]() end
  else
    results[1] = 0
    for i = 1, #KEYS do
      results[1 + 5 * (i - 1) + 3] = nows[i]
      if denies[i] then denies[i]() end
    end
  end
  return results
end
