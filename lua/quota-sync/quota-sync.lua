--[[ quota-sync.lua: one Quotas sync call (protocol 2; sdk/src/wire.ts is the contract and builds the arguments).
Applies an instance's usage and refunds for the keys of one slot group, once per (instance, seq), and
answers each key's allowance (approximate) or reserved tokens (strict).
KEYS[1]    <ns>:q:{<rule>.<group>}:cfg    hash { v = config version, r = encoded rule, q = quiet until: a rule
           restored after a loss grants nothing new before then (lua/quota-rule.lua) }
KEYS[2]    <ns>:q:{<rule>.<group>}:seq    hash instance -> "highestSeq:mask" (mask: the 32 seqs below it), and
           the clocks of store-time.lua ("#clock", "#c:<instance>")
KEYS[3]    <ns>:q:{<rule>.<group>}:inst   sorted set instance -> last sync (ms)
KEYS[3+i]  <ns>:q:{<rule>.<group>}:k:<key_i>   key i: hash { L = layout, h = demand, ring cursors,
           latest buckets and sums (packed), r = older buckets (packed), i:<instance> = that instance's
           demand and grant (packed) }
ARGV[1..5] protocol (2), the caller's now (ms; the call's time is it as the store holds it, store-time
           below), instanceId, seq, configVersion seen; instanceId "" (no client's: the
           protocol refuses it) is a read (`tollgate quotas usage`): nothing is applied, granted or written,
           and the reader is not counted as an instance
ARGV[5+i]  key i: little-endian doubles offered, want, #usage, #refunds, then #usage pairs at, count
           (strict: grantedAt, tokens spent) and #refunds pairs grantedAt, count, then (strict, optional)
           #usage doubles spentAgo: those tokens were spent at least that many ms before the request was
           sent (absent: 0 each; never dated before their grant) (packed, never text: unpacking is one C
           call, where parsing "at:count" cost a pattern match and two tonumber each)
Reply      { 2, status ("applied"|"duplicate"|"stale"|"norule"), now, configVersion, rule (encoded, or ""
           when the request saw this version), mode, windows, instances, then per key: amount
           (allowance | tokens), expiresAt (validUntil | leaseExpiresAt), denyUntil, resetAt, used per window }

Windows are rings of buckets with running sums, updated incrementally: a bucket is 50 ms for windows up
to 5 s and W/100 beyond (strict's spent tokens: W/100 always, 10 ms for 1 s), so a sum is read, never recomputed; windows with the same bucket size share a
ring. approximate reserves each allowance when it grants it (in the key's i:<instance> field)
and settles it at that instance's next applied sync: the usage reported is charged to it (so counted
from the grant, or from SETTLE_LAG_MS before the report when that is later), the unused rest goes back,
usage beyond it (admitted under a fallback) counts at its epochs. So allowances handed out at different
instants see each other; the windows sum reservations and usage over the last W/bucket + 1 buckets (the
extra bucket covers usage spent up to a bucket after its grant; spent later, e.g. after a late reply, it
leaves the window early, by SETTLE_LAG_MS at most: the approximate part).
strict sums the grants not reported spent over every bucket that touches (now - W - lease, now] and the
tokens reported spent (usage: grantedAt:count) over W plus STAMP_SKEW_MS from their stamp (now - spentAgo,
the report's now without one: never before the spend on the reporter's clock, and the extra time covers
callers' clocks that disagree by up to that much), so used tokens in any W stay <= max (docs/DECISIONS.md
has the argument).
The chunk returns the call as a function of (KEYS, ARGV): run as a Redis Function, the structures of
a rule (its limits, rings and windows, the formats of a key) are built once per rule text and node
(prepare, below), and the functions over them once per node, not once per call. ]]
local REORDER = 32
local ACTIVE_MS = 5000
local DEMAND_TAU_MS = 1000
-- every instance is credited a pseudo-demand of 1/8 of an even split of the limit's rate: idle
-- instances get an even share (and can admit their first request), busy ones a share close to their
-- demand, and the shares of all instances still add up to 1
local PSEUDO_DEMAND = 1 / 8
-- callers' clocks are trusted to agree within this many ms: each caller's now is its own clock, so strict's
-- spent tokens count over W plus at least this much from their date (the stamp, or the report), which is on
-- the reporter's clock; without it a caller a few ms behind filed a spend in the bucket before its use, out
-- of every window early (an age dated later by this much, as before, left reports without an age uncovered)
local STAMP_SKEW_MS = 10
-- approximate: usage charged to a reservation counts from the grant, or from this long before its report
-- when that is later (two buckets of 50 ms: a report on time, about an interval after its grant, counts
-- from the grant as before); so no usage leaves a window more than this early
local SETTLE_LAG_MS = 100
-- strict: the buckets of a window's spent tokens (their ring's bucket is W / SPENT_BUCKETS)
local SPENT_BUCKETS = 100

-- a slot is an unsigned 32-bit count: a reservation only happens below max (at most 10^9) and is at most
-- max, so it always fits; usage beyond reservations is capped at SLOT_MAX (far beyond any limit)
local SLOT, SLOT_BYTES, SLOT_MAX = '<I4', 4, 4294967295
-- own demand, its time, and the last approximate grant: its seq (0: none), time and amount
local INSTANCE_FORMAT = '<ddddd'
local PAIR_FORMAT = '<dd'
-- the most values one unpack() hands a command (Lua 5.1's C stack holds about 8,000)
local UNPACK_SLICE = 1000
-- the standard functions the per-key path calls, bound at the start of every call (Redis 7.0 runs a
-- library's top level with only `redis` in reach): a local is one VM step, a global's field three
local floor, min, max, exp, spack, sunpack, rcall

--- @include "prepared-rule"

--- @include "key-rings"

--- @include "carried-over"

--- @include "store-now"

--- @include "store-time"

--- @include "sync-call"
