--[=[ cap-history.lua: one user's send log, for the windows of a frequency check (read-only).
KEYS[1]   the user's block key (see cap-sends.lua for the block format)
ARGV[1]   the user's offset in the block (0..255)
Reply     { time1, identity1, time2, identity2, ... }: every send in the user's history, expired ones
          included (the caller filters by window); empty when the user has none ]=]
local blob = redis.call('GET', KEYS[1])
if not blob then return {} end
local format, _, _, _, identities, times, eventIdentities, classes, users = cmsgpack.unpack(blob)
if format ~= 3 then return redis.error_reply('ERR cap-history: unknown block format in ' .. KEYS[1]) end
local o = tonumber(ARGV[1]) * 2 + 1
local c = string.byte(users, o) * 256 + string.byte(users, o + 1)
local reply = {}
if c == 0 then return reply end
local history = classes[c]
for q = 1, #history, 2 do
  local hi, lo = string.byte(history, q, q + 1)
  local e = hi * 256 + lo
  reply[#reply + 1] = times[e]
  reply[#reply + 1] = identities[eventIdentities[e]]
end
return reply
