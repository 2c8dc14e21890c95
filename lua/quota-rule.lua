--[[ quota-rule.lua: writes (or removes) one quota rule's configuration in one slot group, unless the
configuration there was read from a newer policy (functions/core/quotas/quota-rule-script.ts builds the call).
KEYS[1]  <ns>:q:{<rule>.<group>}:cfg   hash { v = config version, r = encoded rule, t = stamp }
ARGV[1]  stamp: how new the policy this configuration comes from is (rulesStamp in quota-sync-service.ts:
         S3's write time of the policy object first, the writer's read time within that second)
ARGV[2]  config version ("" removes the rule)
ARGV[3]  the encoded rule (sdk/src/wire.ts encodeRule; "" on removal)
ARGV[4]  how long a removal's tombstone lives (ms)
Reply    1 written, 0 refused (the stored stamp is newer)

Compare-and-set on the stamp: check API containers refresh the policy at different times, and one still
serving the previous policy must not put its older rule back over a newer one, whatever its clock says. Equal stamps write (the
same writer again). A removal leaves a tombstone (v = "", which quota-sync.lua answers as `norule`) for
ARGV[4] ms, so an older container cannot bring a removed rule back either. ]]
local stored = tonumber(redis.call('HGET', KEYS[1], 't'))
local stamp = tonumber(ARGV[1])
if stored and stored > stamp then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'r', ARGV[3], 't', stamp)
if ARGV[2] == '' then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
else
  redis.call('PERSIST', KEYS[1])
end
return 1
