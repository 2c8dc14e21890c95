--[[ sliding-log.lua: the exact sliding log: every charged unit in (t - window, t] counts, with a running total
so that a call reads only what changes, whatever the log's length; a denial finds its retry time by a binary
search over cumulative costs, not by walking the log.
Defines ALGORITHMS['sliding-log'] (see limit-common.lua).
State   KEYS[i] = a list: element 1 the head (struct "<ddddd": the running total, i.e. the sum of the costs
        below it, the number of entries below it, the newest entry's time and cost, and the base: the
        cumulative cost before the first entry), then one element per millisecond that was charged, oldest
        first (struct "<ddd": time ms, cost, cumulative cost: the base plus the costs of this entry and every
        one before it). Charges in the same millisecond add up in one element, so many charges in one ms
        cost O(1) each and need no unique members. Earlier layouts: a head of 32 bytes (the first four
        fields) or of 8 bytes (the total alone, read with LLEN and the last element), with entries of
        "<dd" (time, cost); read as they are, and rewritten in this layout (once, the whole list) by the next
        charge. Each layout extends the one before, so the scripts before it read this one (a rollout runs
        both): one that charges writes its own head, and the next charge here rewrites the list.
Params  p1 max, p2 windowMs
Allowed with t = max(now, the newest entry's time): the sum of costs in (t - window, t] + cost <= max
Replay  a request dated before the newest entry is decided and recorded at the newest entry's time: the
        log's times only move forward, and what a backfill adds counts at least as long as it would have.
Change  a new windowMs applies at once; entries already dropped by a shorter window stay dropped.
Result  allowed, limit, remaining if charged, remaining now, resetAt (when everything counted has aged
        out), retryAfterMs, commit when deferred ]]
-- Counts passed to redis.call as text: Redis 7.0 formats a Lua number argument with snprintf("%.17g"),
-- about 2,700 instructions each, a tenth of a call. LPOP's count is mostly 2 (the head and one aged-out
-- entry).
local COUNTS = { '1', '2', '3', '4', '5', '6', '7', '8' }
-- the head's size in this layout (earlier ones: 32 and 8)
local LOG_HEAD_BYTES = 40
-- elements per RPUSH when a log is rewritten (Lua's unpack is limited by the C stack)
local REWRITE_CHUNK = 1000

-- rewrites a log of an earlier layout (entries without their cumulative cost) in this one, keeping its
-- lifetime: once per log, at its first charge (a peek never writes)
local function logRewrite(key, head)
  -- `unpack` of the list's elements is Lua's own (a table's values), struct's reads the bytes
  local call, read, pack = redis.call, struct.unpack, struct.pack
  local list = call('LRANGE', key, '1', '-1')
  local total = read('<d', head)
  -- the newest entry: the earliest layout's head lacks it
  local newest, newestCost = read('<dd', #head == 8 and list[#list] or head, #head == 8 and 1 or 17)
  local ttl, sum, out = call('PTTL', key), 0, {}
  for i = 1, #list do
    local t, c = read('<dd', list[i])
    sum = sum + c
    out[i] = pack('<ddd', t, c, sum)
  end
  call('DEL', key)
  call('RPUSH', key, pack('<ddddd', total, #list, newest, newestCost, 0))
  for from = 1, #out, REWRITE_CHUNK do
    local to = from + REWRITE_CHUNK - 1
    if to > #out then to = #out end
    call('RPUSH', key, unpack(out, from, to))
  end
  if ttl > 0 then call('PEXPIRE', key, ttl) end
end

-- writes a charge: adds it (to its ms if it has one), drops the aged-out entries, writes the head; `base` and
-- `total` as the head held them, `expiredCost` what the aged-out entries held (cumulative layout only)
local function logWrite(key, head, entries, expired, newest, newestCost, t, cost, used, window, base, total, expiredCost)
  local call, pack = redis.call, struct.pack
  local count, lastCost = entries - expired + 1, cost
  -- the newest entry's cumulative cost after the charge
  local cumulative = base + total + cost
  if newest == t and expired < entries then
    count, lastCost = entries - expired, newestCost + cost
    call('LSET', key, '-1', pack('<ddd', t, lastCost, cumulative))
  else
    call('RPUSH', key, pack('<ddd', t, cost, cumulative))
  end
  local newHead = pack('<ddddd', used + cost, count, t, lastCost, base + expiredCost)
  if head and expired == 0 then
    call('LSET', key, '0', newHead)
  else
    if head then call('LPOP', key, COUNTS[1 + expired] or 1 + expired) end
    call('LPUSH', key, newHead)
  end
  call('PEXPIRE', key, ttlOf(t + window, window))
end

ALGORITHMS['sliding-log'] = function(key, now, cost, max, window, _, _, deferred)
  local unpack, call = struct.unpack, redis.call
  local total, t, entries, newest, newestCost, base = 0, now, 0, nil, nil, 0
  -- the head and the 2 oldest entries in one read: mostly none or one of them has aged out (each element
  -- read costs Redis about 1,000 instructions)
  local batch = call('LRANGE', key, '0', '2')
  local head = batch[1]
  if head and #head ~= LOG_HEAD_BYTES and cost > 0 then
    logRewrite(key, head)
    batch = call('LRANGE', key, '0', '2')
    head = batch[1]
  end
  -- entries hold their cumulative costs (this layout), or not (an earlier one, read by a peek)
  local cumulative = head == nil or #head == LOG_HEAD_BYTES
  if head then
    if #head == 8 then
      -- the earliest layout: the total alone
      total = unpack('<d', head)
      entries = call('LLEN', key) - 1
      newest, newestCost = unpack('<dd', call('LINDEX', key, '-1'))
    elseif cumulative then
      total, entries, newest, newestCost, base = unpack('<ddddd', head)
    else
      total, entries, newest, newestCost = unpack('<dddd', head)
    end
    if newest > t then t = newest end
  end
  -- the oldest entries that have aged out at t: how many, and their costs; past the 2 read with the head,
  -- a longer run is read in growing chunks
  local cutoff, expired, expiredCost = t - window, 0, 0
  local from, chunk, scanning = 2, 2, entries > 0
  while scanning do
    for i = from, #batch do
      local at, c = unpack('<dd', batch[i])
      if at > cutoff then
        scanning = false
        break
      end
      expired, expiredCost = expired + 1, expiredCost + c
    end
    if scanning then
      if #batch - from + 1 < chunk or expired >= entries then
        scanning = false
      else
        chunk = chunk * 4
        batch, from = call('LRANGE', key, 1 + expired, expired + chunk), 1
      end
    end
  end
  local used = total - expiredCost
  if used + cost <= max then
    local resetAt = t
    if cost > 0 then resetAt = t + window elseif used > 0 then resetAt = newest + window end
    if deferred then
      return true, max, max - used - cost, max - used, resetAt, 0, function()
        if cost > 0 then
          logWrite(key, head, entries, expired, newest, newestCost, t, cost, used, window, base, total, expiredCost)
        end
      end
    end
    if cost > 0 then
      logWrite(key, head, entries, expired, newest, newestCost, t, cost, used, window, base, total, expiredCost)
    end
    return true, max, max - used - cost, max - used, resetAt, 0
  end
  -- the oldest counted entries age out one by one: wait until the first whose cumulative cost reaches what
  -- must have gone (need <= used, so the newest entry does)
  local need, retryAt = used + cost - max, t + window
  if cumulative then
    -- a binary search over the counted entries (list index expired + 1 .. entries): about 17 reads of
    -- 100,000, each a walk of the list's nodes, where reading the entries themselves cost 1,000 instructions each
    local target, lo, hi = base + expiredCost + need, expired + 1, entries
    while lo < hi do
      local mid = lo + floorOf((hi - lo) / 2)
      local _, _, c = unpack('<ddd', call('LINDEX', key, mid))
      if c >= target then hi = mid else lo = mid + 1 end
    end
    retryAt = unpack('<dd', call('LINDEX', key, lo)) + window
  else
    -- an earlier layout (a peek after max was lowered): each holds >= 1 unit, so at most `need` are read
    local freed = 0
    batch = call('LRANGE', key, 1 + expired, expired + need)
    for i = 1, #batch do
      local at, c = unpack('<dd', batch[i])
      freed = freed + c
      if freed >= need then
        retryAt = at + window
        break
      end
    end
  end
  local left = math.max(0, max - used)
  return false, max, left, left, newest + window, retryAt - now
end
