--[[ grab-sliding-log.lua: the baseline of `npm run bench`, Grab's per-user sliding log (seed 000),
extended to check two windows in one call, as a fair single-call-per-user comparison. Not product code.

KEYS[1]   the user's sorted set of send times (member = score = time in ms)
ARGV[1]   now, ms
ARGV[2]   first window, ms     ARGV[3]  its max
ARGV[4]   second window, ms    ARGV[5]  its max
ARGV[6]   eviction: members at or before this time are removed
Reply     1 allowed (recorded), 0 not allowed
]]
local now = tonumber(ARGV[1])
local first = redis.call('ZCOUNT', KEYS[1], '(' .. (now - tonumber(ARGV[2])), now)
local second = redis.call('ZCOUNT', KEYS[1], '(' .. (now - tonumber(ARGV[4])), now)
local allowed = 0
if first < tonumber(ARGV[3]) and second < tonumber(ARGV[5]) then
  redis.call('ZADD', KEYS[1], now, now)
  allowed = 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[6])
return allowed
