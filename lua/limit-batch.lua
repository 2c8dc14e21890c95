--[[ limit-batch.lua: several independent checks of POST /v1/limit whose keys share one hash slot, in one call,
each decided and charged as if it ran alone, one after the other in argument order (the check API's slot
batch: the requests an execution environment received while a call to their slot was in flight). Loaded
after limit-common.lua and every algorithm file.
KEYS[i]    the state key of check i (i = 1..n, n = #ARGV - 1); a key may appear more than once (checks of one key
           see each other's charges, in order); every key in one hash slot
KEYS[n+1]  optional: the epoch key of their slot (storeLost() in limit-common.lua): missing, the call answers
           "STORELOST <KEYS[n+1]>" and counts nothing
ARGV[1]    struct-packed doubles: per check i limit.lua's ARGV[1], 7 doubles: now, cost, p1..p4, clock (the
           function's clock when the check came, ms: what its key's lifetime is counted by)
ARGV[1+i]  the algorithm of check i
Reply      { packed, [i, message]... }: packed is per check allowed, limit, remaining, resetAt, retryAfterMs
           (limit.lua's reply, 5 doubles each); a check Redis refused (an error of its own commands, e.g.
           WRONGTYPE) is all zeros there and listed after it with the error's message: the checks before and
           after it are answered as if each ran alone.
The chunk returns the call as a function of (KEYS, ARGV) (see limit.lua). ]]
return function(KEYS, ARGV)
  local numbers, n = ARGV[1], #ARGV - 1
  local lost = storeLost(KEYS[n + 1])
  if lost then return lost end
  local packed, refused = {}, {}
  for i = 1, n do
    local algorithm = ALGORITHMS[ARGV[1 + i]]
    if algorithm == nil then return redis.error_reply('ERR limit-batch: unknown algorithm ' .. tostring(ARGV[1 + i])) end
    local now, cost, p1, p2, p3, p4, clock = struct.unpack('<ddddddd', numbers, 1 + 56 * (i - 1))
    beginCall(now, clock)
    -- as limit.lua: the algorithm writes its verdict itself (not deferred); a check whose commands Redis
    -- refuses fails alone (pcall), as it would have alone
    local ok, allowed, limit, remaining, remainingNow, resetAt, retry =
      pcall(algorithm, KEYS[i], now, cost, p1, p2, p3, p4)
    if not ok then
      packed[i] = struct.pack('<ddddd', 0, 0, 0, 0, 0)
      refused[#refused + 1] = i
      refused[#refused + 1] = type(allowed) == 'table' and tostring(allowed.err) or tostring(allowed)
    elseif allowed then
      packed[i] = struct.pack('<ddddd', 1, limit, reply(remaining), reply(resetAt), 0)
    else
      packed[i] = struct.pack('<ddddd', 0, limit, reply(remainingNow), reply(resetAt), retryReply(retry, now))
    end
  end
  local result = { table.concat(packed) }
  for j = 1, #refused do result[j + 1] = refused[j] end
  return result
end
