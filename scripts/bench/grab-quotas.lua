--[[ grab-quotas.lua: the baseline of the Quotas bench, Grab's binary-verdict design (seed 001). An
instance flushes its usage count every F; the store adds it to 50 ms buckets of a 1 s sliding window and
answers the window's sum, from which the instance derives allow/deny until its next verdict. Not product
code: the bench runs it to measure the design the SDK replaces, in the same harness.

KEYS[1]   the key's hash of buckets (field = bucket number, value = count)
ARGV[1]   now, ms          ARGV[2]  count to add          ARGV[3]  window, ms     ARGV[4]  bucket, ms
Reply     the window's sum after adding
]]
local now, count, window, bucket = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local current = math.floor(now / bucket)
if count > 0 then redis.call('HINCRBY', KEYS[1], current, count) end
local oldest = current - math.floor(window / bucket) + 1
local sum = 0
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local b = tonumber(fields[i])
  if b < oldest then redis.call('HDEL', KEYS[1], fields[i]) else sum = sum + tonumber(fields[i + 1]) end
end
redis.call('PEXPIRE', KEYS[1], window * 2)
return sum
