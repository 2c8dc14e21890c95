--[[ quota-rule.lua: writes (or removes) one quota rule's configuration in one slot group, unless the
configuration there was read from a newer policy (functions/core/quotas/quota-rule-script.ts builds the call).
KEYS[1]  <ns>:q:{<rule>.<group>}:cfg   hash { v = config version, r = encoded rule, t = stamp, e = epoch,
         q = quiet until }
ARGV[1]  stamp: how new the policy this configuration comes from is (rulesStamp in quota-sync-service.ts:
         S3's write time of the policy object first, the writer's read time within that second)
ARGV[2]  config version ("" removes the rule)
ARGV[3]  the encoded rule (sdk/src/wire.ts encodeRule; "" on removal)
ARGV[4]  how long a removal's tombstone lives (ms)
ARGV[5]  (optional) a restore after the store lost its state: how long nothing new is granted (ms: the rule's
         longest window plus its lease), when this write finds no configuration at all
Reply    1 written, 2 written where no configuration was (a first write, or one after a loss), 0 refused
         (the stored stamp is newer)

Compare-and-set on the stamp: check API containers refresh the policy at different times, and one still
serving the previous policy must not put its older rule back over a newer one, whatever its clock says. Equal stamps write (the
same writer again). A removal leaves a tombstone (v = "", which quota-sync.lua answers as `norule`) for
ARGV[4] ms, so an older container cannot bring a removed rule back either.

The epoch `e` is the store's time (ms) when the configuration was first written in this slot group: a
configuration gone (FLUSHALL, a node back empty) is written again under a new epoch. A restore (ARGV[5])
that finds none also sets `q`, the store's time until which quota-sync grants nothing new (every token
granted before the loss has then aged out of every window). ]]
local stored, epoch = unpack(redis.call('HMGET', KEYS[1], 't', 'e'))
stored = tonumber(stored)
local stamp = tonumber(ARGV[1])
if stored and stored > stamp then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'r', ARGV[3], 't', stamp)
if not epoch then
  local time = redis.call('TIME')
  local storeNow = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call('HSET', KEYS[1], 'e', storeNow)
  local quiet = tonumber(ARGV[5] or '0') or 0
  if not stored and quiet > 0 and ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'q', storeNow + quiet) end
end
if ARGV[2] == '' then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
else
  redis.call('PERSIST', KEYS[1])
end
if not stored then return 2 end
return 1
