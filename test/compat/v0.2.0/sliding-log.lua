--[[ sliding-log.lua: the exact sliding log: every charged unit in (t - window, t] counts, with a running total
so that a call reads only what changes, whatever the log's length.
Defines ALGORITHMS['sliding-log'] (see limit-common.lua).
State   KEYS[i] = a list: element 1 the head (struct "<dddd": the running total, i.e. the sum of the costs
        below it, the number of entries below it, the newest entry's time and cost), then one element per
        millisecond that was charged, oldest first (struct "<dd": time ms, cost). Charges in the same
        millisecond add up in one element, so many charges in one ms cost O(1) each and need no unique
        members. A head of 8 bytes (the total alone) is the layout before the head held the rest: it is
        read with LLEN and the last element, and rewritten in the new layout by the next charge.
Params  p1 max, p2 windowMs
Allowed with t = max(now, the newest entry's time): the sum of costs in (t - window, t] + cost <= max
Replay  a request dated before the newest entry is decided and recorded at the newest entry's time: the
        log's times only move forward, and what a backfill adds counts at least as long as it would have.
Change  a new windowMs applies at once; entries already dropped by a shorter window stay dropped.
Result  allowed, limit, remaining if charged, remaining now, resetAt (when everything counted has aged
        out), retryAfterMs, commit ]]
ALGORITHMS['sliding-log'] = function(key, now, cost, p1, p2)
  local max, window = tonumber(p1), tonumber(p2)
  local unpack, call = struct.unpack, redis.call
  local total, t, entries, newest, newestCost = 0, now, 0, nil, nil
  local head = call('LINDEX', key, 0)
  if head then
    if #head == 8 then
      -- the earlier layout: the total alone
      total = unpack('<d', head)
      entries = call('LLEN', key) - 1
      newest, newestCost = unpack('<dd', call('LINDEX', key, -1))
    else
      total, entries, newest, newestCost = unpack('<dddd', head)
    end
    if newest > t then t = newest end
  end
  -- the oldest entries that have aged out at t: how many, and their costs. Mostly none or one, so a few
  -- of the oldest are read first; a longer run is read in growing chunks.
  local cutoff, expired, expiredCost = t - window, 0, 0
  local chunk, scanning = 4, entries > 0
  while scanning and expired < entries do
    local batch = call('LRANGE', key, 1 + expired, expired + chunk)
    for i = 1, #batch do
      local at, c = unpack('<dd', batch[i])
      if at > cutoff then
        scanning = false
        break
      end
      expired, expiredCost = expired + 1, expiredCost + c
    end
    if #batch < chunk then scanning = false end
    chunk = chunk * 4
  end
  local used = total - expiredCost
  if used + cost <= max then
    local resetAt = t
    if cost > 0 then resetAt = t + window elseif used > 0 then resetAt = newest + window end
    return true, max, max - used - cost, max - used, resetAt, 0, function()
      if cost == 0 then return end
      -- add this charge (to its ms if it has one), drop the aged-out entries, write the head
      local count, lastCost = entries - expired + 1, cost
      if newest == t and expired < entries then
        count, lastCost = entries - expired, newestCost + cost
        call('LSET', key, -1, struct.pack('<dd', t, lastCost))
      else
        call('RPUSH', key, struct.pack('<dd', t, cost))
      end
      local newHead = struct.pack('<dddd', used + cost, count, t, lastCost)
      if head and expired == 0 then
        call('LSET', key, 0, newHead)
      else
        if head then call('LPOP', key, 1 + expired) end
        call('LPUSH', key, newHead)
      end
      call('PEXPIRE', key, ttlOf(t + window, window))
    end
  end
  -- the oldest counted entries age out one by one: wait until enough have gone (each holds >= 1 unit, so
  -- at most `need` entries are read)
  local need, freed, retryAt = used + cost - max, 0, t + window
  local batch = call('LRANGE', key, 1 + expired, expired + need)
  for i = 1, #batch do
    local at, c = unpack('<dd', batch[i])
    freed = freed + c
    if freed >= need then
      retryAt = at + window
      break
    end
  end
  local left = math.max(0, max - used)
  return false, max, left, left, newest + window, retryAt - now
end
