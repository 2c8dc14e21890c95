-- Window sends from..to of a record appended to the parallel arrays after position n; returns the new n.
-- The bytes come out of the record with one string.byte per slice (a send costs a few multiplications, not
-- a function call per field), and the identities this call has not met yet come in one HMGET.
local function appendWindowSends(record, from, to, n, times, onChannel, isMine)
  if to < from then return n end
  local stride = record.stride
  local bytes = bytesOf(sub(record.value, record.start + (from - 1) * stride, record.start + to * stride - 1))
  local numbers, unknown, fields, first, q = {}, {}, {}, n, 0
  for i = 1, to - from + 1 do
    n = n + 1
    times[n] = ((((bytes[q + 1] * 256 + bytes[q + 2]) * 256 + bytes[q + 3]) * 256 + bytes[q + 4]) * 256 +
      bytes[q + 5]) * 256 + bytes[q + 6]
    local number = 0
    for k = q + 7, q + stride do number = number * 256 + bytes[k] end
    numbers[i] = number
    if call.identityByNumber[number] == nil and not unknown[number] then
      unknown[number] = true
      fields[#fields + 1] = number
    end
    q = q + stride
  end
  if #fields > 0 then
    local names = {}
    for i, number in ipairs(fields) do names[i] = string.format('n:%d', number) end
    local found = redis.call('HMGET', call.identityTableKey, unpackList(names))
    for i, number in ipairs(fields) do call.identityByNumber[number] = found[i] or false end
  end
  for i = 1, n - first do
    local sendIdentity = call.identityByNumber[numbers[i]] or ''
    onChannel[first + i], isMine[first + i] = isOnCallChannel(sendIdentity), sendIdentity == call.identity
  end
  return n
end

-- The window sends lo..hi of a record as an ascending list read in place: list[i] decodes one time on demand
-- (a binary search touches log n of them), nothing is copied. With `withAt`, the call's own send at `at` is
-- in the list too, after the sends at or before it. Fields: inPlace, record, lo, hi; for a record spanning
-- chunks (hot.spanned()) also upTo(t), countUpTo()'s figure found by the record's own search, which reads at
-- most the one chunk holding t.
local function inPlaceList(record, lo, hi, withAt)
  local atIndex = math.huge
  if withAt then atIndex = math.min(math.max(firstAfter(record, at), lo), hi + 1) - lo + 1 end
  local list = { inPlace = true, record = record, lo = lo, hi = hi }
  if record.spanned then
    local timeAt, known = record.timeAt, {}
    -- (the caps' searches ask for the same times again: `at`, and each window's ends around it)
    list.upTo = function(t)
      local sends = known[t]
      if sends == nil then
        sends = math.min(math.max(firstAfter(record, t) - lo, 0), hi - lo + 1)
        known[t] = sends
      end
      return (withAt and at <= t) and sends + 1 or sends
    end
    return setmetatable(list, { __index = function(_, i)
      if i < atIndex then return timeAt(lo + i - 1) end
      if i == atIndex then return at end
      return timeAt(lo + i - 2)
    end })
  end
  local value, stride = record.value, record.stride
  local base = record.start + (lo - 2) * stride
  -- present, so that countUpTo()'s look at it never reaches __index
  list.upTo = false
  return setmetatable(list, { __index = function(_, i)
    if i < atIndex then return readTime(value, base + i * stride) end
    if i == atIndex then return at end
    return readTime(value, base + (i - 1) * stride)
  end })
end

-- A Lua pattern matching exactly the bytes of `text` (%z for a zero byte, % before any other non-alphanumeric).
local function literalPattern(text)
  local parts = {}
  for i = 1, #text do
    local c = sub(text, i, i)
    parts[i] = c == '\0' and '%z' or string.find(c, '^%w') and c or '%' .. c
  end
  return concat(parts)
end

-- Whether every window send lo..hi of a record names identity number `number`: in C, one string.gsub over the
-- slice counting non-overlapping matches of "6 bytes, then that number"; as many matches as sends means they
-- tile the slice, so each is aligned on a send.
local function allOfNumber(record, lo, hi, number)
  if widthOf(number) > record.width then return false end
  local stride = record.stride
  local slice = sub(record.value, record.start + (lo - 1) * stride, record.start + hi * stride - 1)
  local _, matches = string.gsub(slice, '......' .. literalPattern(fixedNumber(number, record.width)), '')
  return matches == hi - lo + 1
end

-- Whether the window sends lo..hi of a record can be counted without their identities for `profile`: every
-- cap counts every channel's sends, or they all name one identity of the call's channel (a user's checks
-- without a campaign ID, or one campaign's resends). `record` read from a chunked `head`'s chunks
-- (hot.spanned(), hot.sends()): its sends come from the head's window part and from chunks whose identities
-- the head lists, so that list naming one identity and the window part holding only it suffice, whatever the
-- chunks hold (no chunk is read for it).
local function countableInPlace(profile, record, lo, hi, head)
  local every = true
  for cap = 1, #profile.windows do every = every and profile.everyChannel[cap] end
  if every or hi < lo then return true end
  local acrossChunks, number = head ~= record and head.chunked, nil
  -- (a chunk whose identities are not listed yet could hold any)
  if acrossChunks and head.chunked.unlisted > 0 then return false end
  if acrossChunks then
    for spilledNumber in pairs(head.chunked.spilled) do
      if number and spilledNumber ~= number then return false end
      number = spilledNumber
    end
    if head.count > 0 then
      if number and sendNumber(head, 1) ~= number then return false end
      number = sendNumber(head, 1)
      if not allOfNumber(head, 1, head.count, number) then return false end
    end
  else
    number = sendNumber(record, lo)
  end
  -- the call's own identity (its number is read with the records) is on its channel: no lookup
  local onChannel = number == call.myNumber or isOnCallChannel(identityOfNumber(number) or '')
  return onChannel and (acrossChunks or allOfNumber(record, lo, hi, number))
end

-- A user's live sends as parallel arrays, from a block class (may be nil) and a record (may be nil), and
-- whether the record holds a send of this call's identity anywhere (window part or tail: a duplicate,
-- whatever the caps of the user's segment reach). Of the record, only the sends some window around `at` can
-- hold, or with `onward` every send after at - longest (a capped report's retry time may lie past every
-- window around `at`). The arrays are the same tables at every call (only 1..n is meaningful): use them
-- before the next call.
-- When the user has no block sends, no tail send some window around `at` reaches, and the record's sends in
-- reach are countable without their identities (countableInPlace()), `times` is an inPlaceList() of them
-- instead (onChannel and isMine are then empty): decide() and windowsLine() count them by binary searches, so
-- a check's work does not grow with the sends in its windows.
local function liveSends(profile, block, class, record, onward)
  local times, onChannel, isMine, n = call.scratchTimes, call.scratchOnChannel, call.scratchIsMine, 0
  -- only the window sends some cap's window around `at` can hold (or every later one, `onward`): a binary
  -- search finds them, the rest is never decoded
  local reach = math.max(profile.cutoff, at - profile.longest)
  local before = onward and math.huge or at + profile.longest
  -- a chunked record: its window part and the chunks in reach (its spilled identities answer a duplicate)
  local head = record
  if record and record.chunked then record = hot.spanned(record, reach, before) or hot.sends(record, reach, before, false) end
  if record and not (block and class > 0) and not (record.tail and record.tail.newest > reach) then
    local lo = firstAfter(record, reach)
    local hi = math.max(onward and record.count or firstAfter(record, before - 1) - 1, lo - 1)
    if countableInPlace(profile, record, lo, hi, head) then times, n = inPlaceList(record, lo, hi, false), hi - lo + 1 end
  end
  -- not countable in place: a record spanning chunks is read joined
  if record and record.spanned and not times.inPlace then record = hot.sends(head, reach, before, false) end
  if block and class > 0 then
    for _, e in ipairs(eventsOfClass(block.classes[class], block.width)) do
      local t = block.times[e]
      if t > profile.cutoff then
        local eventIdentity = block.identities[block.eventIdentities[e]]
        n = n + 1
        times[n], onChannel[n], isMine[n] = t, isOnCallChannel(eventIdentity), eventIdentity == call.identity
      end
    end
  end
  if record and not times.inPlace then
    local to = onward and record.count or firstAfter(record, before - 1) - 1
    n = appendWindowSends(record, firstAfter(record, reach), to, n, times, onChannel, isMine)
    -- the tail only when some window around `at` reaches its newest send (a policy change lengthened one)
    local tail = record.tail
    if tail and tail.newest > reach then
      local tailTimesList = tailTimes(tail)
      for i = 1, tail.count do
        local t = tailTimesList[i]
        if t > reach and t < before then
          local sendIdentity = identityOfNumber(readFixed(tail.ids, (i - 1) * tail.width + 1, tail.width)) or ''
          n = n + 1
          times[n], onChannel[n], isMine[n] = t, isOnCallChannel(sendIdentity), sendIdentity == call.identity
        end
      end
    end
  end
  -- a send of this identity anywhere in the record (window part or tail) makes it a duplicate, even where
  -- no cap's window around `at` reaches it (a channel the segment does not cap has no window at all)
  if record and not call.anonymous then
    local mine = myIdentityNumber(false)
    local spilled = head.chunked and head.chunked.spilled[mine]
    if mine and (windowHas(head, mine, profile.cutoff) or tailHas(head.tail, mine, profile.cutoff) or
      (spilled and spilled > profile.cutoff) or (head.chunked and hot.unlistedHas(head, mine, profile.cutoff))) then
      return n, times, onChannel, isMine, true
    end
  end
  return n, times, onChannel, isMine, false
end

-- How many of list[1..count] (ascending) are at or before t: a binary search, after a look at both ends
-- (a window around `at` mostly starts before every send and ends after every one).
local function countUpTo(list, count, t)
  if list.upTo then return list.upTo(t) end
  if count == 0 or list[1] > t then return 0 end
  if list[count] <= t then return count end
  local low, high = 2, count
  while low < high do
    local middle = floor((low + high) / 2)
    if list[middle] > t then high = middle else low = middle + 1 end
  end
  return low - 1
end

-- How many of list[1..count] (ascending) lie in [from, to) (`to` nil: from `from` on): a calendar period's.
local function countWithin(list, count, from, to)
  return (to and countUpTo(list, count, to - 1) or count) - countUpTo(list, count, from - 1)
end

-- The fullest window (y - window, y] containing x (y from x to x + window - 1) of the ascending times
-- list[1..count]: how many it holds and the index of its oldest. The count only rises at y = x and at a
-- send's time, so those are the right ends tried, each by two binary searches; of equally full windows the
-- first wins (its oldest send ages out first). fullWindow() decides by the same rule.
local function fullestAround(list, count, x, window)
  local fullest, oldest, y, following = -1, 0, x, countUpTo(list, count, x) + 1
  while true do
    local first = countUpTo(list, count, y - window) + 1
    local inside = countUpTo(list, count, y) - first + 1
    if inside > fullest then fullest, oldest = inside, first end
    if following > count or list[following] >= x + window then return fullest, oldest end
    y = list[following]
    following = following + 1
  end
end

-- The latest right end y (x <= y < x + window) of a window (y - window, y] of the ascending times list[1..count]
-- holding `max` or more, nil when none does: every x' in (x, y] is in that window too, so none of them has room.
local function lastFullEnd(list, count, x, window, max)
  local found, y, following = nil, x, countUpTo(list, count, x) + 1
  while true do
    if countUpTo(list, count, y) - countUpTo(list, count, y - window) >= max then found = y end
    if following > count or list[following] >= x + window then return found end
    y = list[following]
    following = following + 1
  end
end

-- The end of the calendar period holding x (calendar-window.lua) less 1 when it holds `max` or more of the
-- ascending list[1..count] (math.huge for the open last period), nil when it has room: lastFullEnd()'s figure.
local function fullPeriodEnd(period, list, count, x, max)
  local from, to = periodAround(period, x)
  if countWithin(list, count, from, to) < max then return nil end
  return to and to - 1 or math.huge
end

-- The reply code for a user of `profile` whose n live sends are the inPlaceList() `list` (liveSends()), by the
-- rule of decideSends(): a cap is full when its fullest window around `at` holds its max (fullWindow()'s rule),
-- found by binary searches.
local function inPlaceUnderMaxima(profile, n, list)
  if call.exemptCounted then return REPLY_EXEMPT end
  if n < profile.least then return 0 end
  local windows, maxima, periods = profile.windows, profile.maxima, profile.periods
  for cap = 1, #windows do
    local max, period = maxima[cap], periods[cap]
    if max == 0 then return REPLY_FIRST_CAP + cap - 1 end
    if n >= max then
      local used
      if period then used = countWithin(list, n, period[1], period[2]) else used = fullestAround(list, n, at, windows[cap]) end
      if used >= max then return REPLY_FIRST_CAP + cap - 1 end
    end
  end
  return 0
end
decideInPlace = function(profile, n, list)
  local code = inPlaceUnderMaxima(profile, n, list)
  if code < REPLY_FIRST_CAP or not profile.full then return code end
  return displacedOr(code, inPlaceUnderMaxima(profile.full, n, list))
end
