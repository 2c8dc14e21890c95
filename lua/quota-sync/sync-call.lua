local head = {}
return function(KEYS, ARGV)
  -- another protocol's arguments would be read as garbage: a caller with an older copy of wire.ts
  if ARGV[1] ~= '2' then return redis.error_reply('ERR quota-sync: protocol 2 expected, got ' .. ARGV[1]) end
  floor, min, max, exp = math.floor, math.min, math.max, math.exp
  spack, sunpack, rcall = struct.pack, struct.unpack, redis.call
  local instance, seq, seen = ARGV[3], tonumber(ARGV[4]), ARGV[5]
  local reading = instance == ''
  local callerNow = tonumber(ARGV[2])
  if not callerNow then return redis.error_reply('ERR quota-sync: now (ARGV[2]) must be a number') end
  now = callTime(callerNow, KEYS[1], KEYS[2], instance, reading)
  -- approximate epochs are on the caller's clock: each counts at the same age on the call's time
  local epochShift = now - callerNow
  -- every entry is checked before anything is written (a script's writes stay when it fails later): little-
  -- endian doubles offered, want, #usage, #refunds, then the usage pairs and the refunds'
  if #ARGV ~= #KEYS + 2 then return redis.error_reply('ERR quota-sync: one entry per quota key expected') end
  for i = 4, #KEYS do
    local entry = ARGV[i + 2]
    local size = #entry
    if size < 32 then return redis.error_reply('ERR quota-sync: malformed entry ' .. (i - 3)) end
    local usages, refunds = sunpack('<dd', entry, 17)
    local base = 32 + 16 * (usages + refunds)
    if size ~= base and size ~= base + 8 * usages then
      return redis.error_reply('ERR quota-sync: malformed entry ' .. (i - 3))
    end
  end

  local cfg = rcall('HMGET', KEYS[1], 'v', 'r', 'q')
  local version, ruleText = cfg[1], cfg[2]
  -- restored after the store lost its state (lua/quota-rule.lua): nothing new is granted before then
  local quietUntil = tonumber(cfg[3]) or 0
  -- no configuration, or a removed rule's tombstone (lua/quota-rule.lua)
  if not version or version == '' then return { 2, 'norule', now, '', '', '', 0, 0 } end
  local reply = { 2, 'applied', now, version, version == seen and '' or ruleText }
  local n = 8 -- the reply's last entry

  local P = prepare(ruleText)
  local mode, lease, strict, limits, windows = P.mode, P.lease, P.strict, P.limits, P.windows
  local longest, slowest, layout, previousLayout = P.longest, P.slowest, P.layout, P.previousLayout
  local RINGS, HEADER, HEADER_FORMAT, SUMS_AT = P.RINGS, P.HEADER, P.HEADER_FORMAT, P.SUMS_AT
  local B3_HEADER, B3_FORMAT, KEY_TTL = P.B3_HEADER, P.B3_FORMAT, P.KEY_TTL
  ringList, ringsOf, reserveRings, RING_BYTES = P.ringList, P.ringsOf, P.reserveRings, P.RING_BYTES
  for r = 1, RINGS do
    local ring = ringList[r]
    ring.now = floor(now / ring.q)
  end
  reply[6], reply[7] = mode, #limits

  -- idempotency: highest seq applied, and a mask of which of the REORDER seqs below it were applied
  local status = 'applied'
  local record = rcall('HGET', KEYS[2], instance)
  local high, mask = 0, 0
  if record then
    local h, m = string.match(record, '^(%d+):(%-?%d+)$')
    high, mask = tonumber(h), tonumber(m)
  end
  if seq > high then
    local shift = seq - high
    if high == 0 or shift > REORDER then
      mask = 0
    elseif shift == REORDER then
      mask = bit.lshift(1, REORDER - 1) -- LuaBitOp masks shift counts to 5 bits: never shift by 32
    else
      mask = bit.bor(bit.lshift(mask, shift), bit.lshift(1, shift - 1))
    end
    high = seq
  elseif seq == high then
    status = 'duplicate'
  elseif high - seq > REORDER then
    status = 'stale'
  else
    local flag = bit.lshift(1, high - seq - 1)
    if bit.band(mask, flag) ~= 0 then status = 'duplicate' else mask = bit.bor(mask, flag) end
  end
  local applied = status == 'applied' and not reading
  reply[2] = status
  -- %d, not tostring: a seq of 15 digits or more (the schema allows up to 2^53 - 1) would be written 1e+14
  if applied then
    local highAndMask = string.format('%d:%d', high, mask)
    rcall('HSET', KEYS[2], instance, highAndMask, CLOCK_FIELD, callClock, ownClockField(instance), ownClock)
  end

  -- the seq and instance records outlive the longest window, so a replay they no longer know about only
  -- carries usage too old to count; their expiry is pushed on for new members and every 16th seq
  local retention = math.ceil(max(longest, 60000)) + 60000
  local newInstance = not reading and rcall('ZADD', KEYS[3], now, instance) == 1
  if newInstance or (not reading and seq % 16 == 0) then
    local gone = rcall('ZRANGEBYSCORE', KEYS[3], '-inf', now - retention, 'LIMIT', 0, 32)
    if #gone > 0 then
      rcall('ZREM', KEYS[3], unpack(gone))
      rcall('HDEL', KEYS[2], unpack(gone))
      for g = 1, #gone do gone[g] = ownClockField(gone[g]) end
      rcall('HDEL', KEYS[2], unpack(gone))
    end
    rcall('PEXPIRE', KEYS[2], retention)
    rcall('PEXPIRE', KEYS[3], retention)
  end
  local instances = rcall('ZCOUNT', KEYS[3], now - ACTIVE_MS, '+inf')
  reply[8] = instances
  -- in requests over one DEMAND_TAU_MS
  local pseudo = slowest * DEMAND_TAU_MS * PSEUDO_DEMAND / max(instances, 1)

  local INSTANCE_FIELD = 'i:' .. instance

  for i = 4, #KEYS do
    local key = KEYS[i]
    local entry = ARGV[i + 2]
    local offered, want, usages, refunds = sunpack('<dddd', entry)
    local meta = rcall('HMGET', key, 'L', 'h', INSTANCE_FIELD)
    local writeLayout = meta[1] ~= layout
    local stored, converted = nil, false
    slots, slotsKey = false, key
    if not writeLayout then
      if meta[2] and #meta[2] == HEADER * 8 then
        stored = { sunpack(HEADER_FORMAT, meta[2]) }
        slots = nil -- read when needed
      end
    elseif meta[1] == previousLayout then
      -- stored as b3: the same counts, read from its blob (written as b4 below; a read converts nothing)
      local blob = rcall('HGET', key, 'b')
      if blob and #blob == B3_HEADER * 8 + RING_BYTES then
        local old = { sunpack(B3_FORMAT, blob) }
        slots = string.sub(blob, B3_HEADER * 8 + 1)
        stored = { old[1], old[2], old[3] }
        for r = 1, RINGS do
          local ring, c = ringList[r], old[3 + r]
          local slot = function(bucket)
            return (sunpack(SLOT, slots, ring.base + (bucket % ring.size) * SLOT_BYTES + 1))
          end
          stored[1 + 3 * r], stored[2 + 3 * r], stored[3 + 3 * r] = c, slot(c), slot(c - 1)
        end
        for j = 1, #windows do stored[3 + 3 * RINGS + j] = old[3 + RINGS + j] end
      end
    elseif meta[1] then
      -- another layout (a rule's window, lease or mode changed, or a newer script's buckets): each window's
      -- count is carried over, never dropped (a strict key that started again would over-admit). b4 keeps
      -- its header in 'h'; b3, the format before it, at the start of its blob 'b'
      local header = meta[2]
      if string.sub(meta[1], 1, 3) == 'b3|' then
        local blob = rcall('HGET', key, 'b')
        header = blob and string.sub(blob, 1, 8 * b3HeaderDoubles(meta[1]))
      elseif string.sub(meta[1], 1, 3) ~= 'b4|' then
        header = nil
      end
      stored = header and carriedOver(meta[1], header, windows) or nil
      converted = stored ~= nil
      if not stored then
        -- unreadable: the key starts again
        if not reading then rcall('DEL', key) end
        meta = {}
      end
    end
    if stored then
      for j = 1, #windows do windows[j].sum = stored[SUMS_AT + j] end
    else
      for j = 1, #windows do windows[j].sum = 0 end
    end
    for r = 1, #ringList do
      local ring = ringList[r]
      local c = ring.now
      local last = stored and stored[1 + 3 * r] or nil
      ring.zero = not last
      ring.dirty = not last or writeLayout
      if next(ring.vals) then ring.vals = {} end
      if last then
        ring.hot0, ring.hot1 = stored[2 + 3 * r], stored[3 + 3 * r]
      else
        ring.hot0, ring.hot1 = 0, 0
      end
      if not last or last == c then
        -- a new key (every slot 0), or the ring is where it was
      elseif last > c then
        c = last -- a caller whose clock is behind never rewinds the ring; it writes to the ring's bucket
      elseif c - last >= ring.size then
        ring.zero, ring.dirty = true, true
        ring.hot0, ring.hot1 = 0, 0
        for w = 1, #ring.windows do ring.windows[w].sum = 0 end
      else
        -- moved on by one bucket or several: those leaving each window (newer than `last`: never written)
        -- are taken off its sum; the two latest buckets go to their slots as they stop being the latest,
        -- and the slots of the buckets passed over start again from 0
        ring.cur = last
        for b = last + 1, c do
          for w = 1, #ring.windows do
            local window = ring.windows[w]
            if b - window.span <= last then window.sum = window.sum - read(ring, b - window.span) end
          end
        end
        local size = ring.size
        if c - last == 1 then
          ring.vals[(last - 1) % size] = ring.hot1
          ring.hot1 = ring.hot0
        else
          ring.vals[last % size], ring.vals[(last - 1) % size] = ring.hot0, ring.hot1
          for b = last + 1, c - 2 do ring.vals[b % size] = 0 end
          ring.hot1 = 0
        end
        ring.hot0 = 0
        ring.dirty = true
      end
      ring.cur = c
    end

    -- this instance's own demand and its last approximate grant
    local ownStored, ownAtStored, grantSeq, grantAt, credit = nil, nil, 0, 0, 0
    local instanceStored = meta[3]
    if instanceStored and #instanceStored == 40 then
      ownStored, ownAtStored, grantSeq, grantAt, credit = sunpack(INSTANCE_FORMAT, instanceStored)
    end

    -- approximate: this instance's previous allowance was reserved when granted; the usage reported now
    -- is charged to that reservation (it counts from the grant, the window's one extra bucket covering
    -- the interval in which it was spent), what it did not use goes back, and usage beyond it (admitted
    -- under a fallback) counts at its own epochs
    if applied and not strict then
      local left = credit
      for u = 0, usages - 1 do
        local at, count = sunpack(PAIR_FORMAT, entry, 33 + 16 * u)
        local take = min(left, count)
        left = left - take
        if count > take then add('a', at + epochShift, count - take) end
      end
      -- a report that comes long after the grant (a key quiet for a while, a late timer) carries usage that
      -- may have been spent just before it: counted from the grant it left the windows that long early, and
      -- the store granted it again (an instance that held its allowance idle, then spent it, over-admitted
      -- by that much). It counts from SETTLE_LAG_MS before the report at the latest, never before the grant
      -- (from the key's time, as a grant: a reporter whose clock is behind the key's cannot age it early)
      local charged, late = credit - left, grantTime() - SETTLE_LAG_MS
      if charged > 0 and late > grantAt then
        add('a', grantAt, -charged)
        add('a', late, charged)
      end
      if left > 0 then add('a', grantAt, -left) end
    end
    -- strict: refunds leave the grant's bucket; tokens reported spent ([grantedAt, count] in `usage`) too,
    -- and count over W from their stamp instead: now - spentAgo (0 when the entry has none), which the
    -- instance measured from before it sent the request, so never before the spend on this clock (now is
    -- read after the request was sent). Spent before the stamp, they are in no window starting after it - W
    if applied and strict then
      for u = usages, usages + refunds - 1 do
        local at, count = sunpack(PAIR_FORMAT, entry, 33 + 16 * u)
        add('g', at, -count)
      end
      local agesAt = #entry > 32 + 16 * (usages + refunds) and 33 + 16 * (usages + refunds) or nil
      for u = 0, usages - 1 do
        local at, count = sunpack(PAIR_FORMAT, entry, 33 + 16 * u)
        at = min(at, now)
        local spentAt = now
        if agesAt then
          local ago = sunpack('<d', entry, agesAt + 8 * u)
          if ago > 0 then spentAt = max(now - ago, at) end
        end
        -- a limit whose window no longer counts the grant has no use for its tokens either
        for j = 1, #limits do
          local grants, spent = limits[j].parts[1], limits[j].parts[2]
          local bucket = min(floor(at / grants.ring.q), grants.ring.cur)
          if bucket > grants.ring.cur - grants.span then addTo(spent.ring, spentAt, count) end
        end
        add('g', at, -count)
      end
    end

    -- demand: the key's offered requests and this instance's, as counts decaying with DEMAND_TAU_MS;
    -- the instance's share is its part of the recent demand
    local demand, demandAt = 0, now
    if stored then demand, demandAt = decay(stored[1], stored[2]) end
    local own, ownAt = 0, now
    if ownStored then own, ownAt = decay(ownStored, ownAtStored) end
    if applied then
      demand, own = demand + offered, own + offered
    end
    local share = (own + pseudo) / (demand + instances * pseudo)
    if share > 1 then share = 1 end

    -- the tightest window decides
    local tight, remaining = nil, nil
    for j = 1, #limits do
      local limit = limits[j]
      local left = limit.max - limitSum(limit)
      if remaining == nil or left < remaining then tight, remaining = limit, left end
    end
    -- strict: the instance's part of what is left, or of twice what a bucket frees at the limit's rate when
    -- less is left: a part of what is left alone shrinks with it, and syncs that each take a part of a small
    -- remainder leave about a third of what a bucket frees ungranted ((1 - 1/N)^N), idle capacity.
    -- approximate takes twice its part of what is left (never more than is left): with one part, the N
    -- syncs of an interval left about a third of it ungranted ((1 - 1/N)^N), with two about an eighth
    -- (e^-2). No floor as strict's: the small remainder kept absorbs what instances spend outside their
    -- reservation (late replies), and granting it all raised the over-admission under load
    local fair = share * max(remaining, tight.floor)
    local amount, denyUntil = 0, 0
    local quiet = now < quietUntil
    if strict then
      if applied and want > 0 and remaining > 0 and not quiet then
        amount = min(want, remaining, math.ceil(fair))
        reserve(amount)
        remaining = remaining - amount
      end
    elseif applied then
      if remaining > 0 and not quiet then
        amount = floor(min(remaining, 2 * share * remaining))
        -- never more than about two intervals of what this instance was offered in its last one: a
        -- reservation it would not spend is capacity the other instances cannot have until its next sync
        if amount > 2 * offered + 1 then amount = 2 * offered + 1 end
        if amount == 0 and remaining >= instances then amount = 1 end
        -- requests waiting for this reply (`decide`: want) are granted before any share, from what is left
        if amount < want then amount = min(want, remaining) end
        reserve(amount) -- `remaining` stays as it was: denyUntil means nothing could be granted
      end
      grantSeq, grantAt, credit = seq, grantTime(), amount
    elseif grantSeq == seq then
      amount = credit -- a retry of the sync that granted it: the same allowance again
    end
    if quiet then
      denyUntil = quietUntil
    elseif remaining <= 0 then
      -- nothing frees before the next bucket boundary of the tight limit's rings (strict: its spent tokens')
      local ring = tight.first.ring
      denyUntil = (ring.cur + 1) * ring.q
      if tight.second then
        ring = tight.second.ring
        denyUntil = min(denyUntil, (ring.cur + 1) * ring.q)
      end
    end

    local expiresMark = stored and stored[3] or nil
    -- a key carried over from another layout takes this one's TTL at once (a longer window's counts must
    -- not expire with the old layout's shorter TTL)
    local refresh = not expiresMark or converted or now - expiresMark >= 1000
    local added = 0
    if not reading then
      head[1], head[2], head[3] = demand, demandAt, refresh and now or expiresMark
      local dirty = false
      for r = 1, RINGS do
        local ring = ringList[r]
        head[1 + 3 * r], head[2 + 3 * r], head[3 + 3 * r] = ring.cur, ring.hot0, ring.hot1
        dirty = dirty or ring.dirty
      end
      for j = 1, #windows do head[SUMS_AT + j] = windows[j].sum end
      local header = spack(HEADER_FORMAT, unpack(head, 1, HEADER))
      local instanceValue = spack(INSTANCE_FORMAT, own, ownAt, grantSeq, grantAt, credit)
      if writeLayout then
        rcall('HSET', key, 'h', header, 'r', ringBytes(), INSTANCE_FIELD, instanceValue, 'L', layout)
        if meta[1] and string.sub(meta[1], 1, 3) == 'b3|' then rcall('HDEL', key, 'b') end
      elseif dirty then
        rcall('HSET', key, 'h', header, 'r', ringBytes(), INSTANCE_FIELD, instanceValue)
      else
        rcall('HSET', key, 'h', header, INSTANCE_FIELD, instanceValue)
      end
      if not instanceStored then added = 1 end
      if refresh then rcall('PEXPIRE', key, KEY_TTL) end
    end
    -- an instance new to the key: when the key holds many more instances than sync the group lately, the
    -- fields of those silent for longer than the seq records are kept go (their grants left every window)
    if added > 0 and rcall('HLEN', key) > 2 * instances + 10 then
      local all = rcall('HGETALL', key)
      local gone = {}
      for f = 1, #all, 2 do
        if string.sub(all[f], 1, 2) == 'i:' and (sunpack('<d', all[f + 1], 9)) < now - retention then
          gone[#gone + 1] = all[f]
        end
      end
      -- in slices: unpack() of more than ~8,000 values fails (Lua's C stack), and it would fail after this
      -- call had recorded its seq and written its keys
      for from = 1, #gone, UNPACK_SLICE do rcall('HDEL', key, unpack(gone, from, min(from + UNPACK_SLICE - 1, #gone))) end
    end

    reply[n + 1], reply[n + 2], reply[n + 3] = amount, now + lease, denyUntil
    reply[n + 4] = (tight.first.ring.cur + tight.first.span) * tight.q
    n = n + 4
    for j = 1, #limits do
      n = n + 1
      reply[n] = limitSum(limits[j])
    end
  end
  return reply
end
