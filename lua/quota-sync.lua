--[[ quota-sync.lua: one Quotas sync call (protocol 1; sdk/src/wire.ts is the contract and builds the arguments).
Applies an instance's usage and refunds for the keys of one slot group, once per (instance, seq), and
answers each key's allowance (approximate) or reserved tokens (strict).
KEYS[1]    <ns>:q:{<rule>.<group>}:cfg    hash { v = config version, r = encoded rule }
KEYS[2]    <ns>:q:{<rule>.<group>}:seq    hash instance -> "highestSeq:mask" (mask: the 32 seqs below it)
KEYS[3]    <ns>:q:{<rule>.<group>}:inst   sorted set instance -> last sync (ms)
KEYS[3+i]  <ns>:q:{<rule>.<group>}:k:<key_i>   key i's rings, window sums and demand
ARGV[1..6] protocol (1), now (ms), instanceId, seq, configVersion seen, elapsedMs since the previous sync
ARGV[6+4*(i-1)+1 .. +4]  key i: usage "at:count,...", refunds "grantedAt:count,...", offered, want
Reply      { 1, status ("applied"|"duplicate"|"stale"|"norule"), now, configVersion, rule (encoded, or ""
           when the request saw this version), mode, windows, instances, then per key: amount
           (allowance | tokens), expiresAt (validUntil | leaseExpiresAt), denyUntil, resetAt, used per window } ]]
return redis.error_reply('ERR quota-sync: not implemented yet')
