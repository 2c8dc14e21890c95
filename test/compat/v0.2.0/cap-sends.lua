--[=[ cap-sends.lua: exact multi-window frequency caps for many users in one call, over the users' own
recent sends only.

A user's sends live in one of two places, both under the call's hash tag (one slot):
  - a page block: one key per page of 256 consecutive user IDs that a campaign reached densely; users of a
    page mostly share their histories, so a block stores each send (event) and each history (class) once;
  - a user record: one field per user, in a hash shared by the sparse users of a wide ID range, with the
    user's own sends: those its windows need (6-byte time + identity number each), then older ones kept
    to recognise a redelivery (readRecord() states the format). Single-user calls and sparse
    campaign users write here, so they never rewrite a page of 256 users.
A user's sends are the union of both. A page written through its block absorbs (and deletes) the user
records of the users it writes.

KEYS[1]          the tag's identity table (hash), "<prefix>ids": the call's only declared key (ioredis and
                 Redis Cluster route the call by it). "i:<identity>" -> number, "n:<number>" -> identity,
                 "t:<number>" -> when a call last wrote a send of it (now), "next" -> last number given,
                 "sweep"/"floor" -> where the pruning looks next / below which every number is dropped; user
                 records name identities by number.
                 Numbers are never reused; an identity unused for horizon + IDENTITY_MARGIN_MS is dropped
                 (no kept send can name it), a few numbers looked at whenever a number is given
Every other key is built here from the prefix ARGV[9] (the call's hash tag, so the same slot as KEYS[1]):
  "<prefix>u:<range>"  the record blob of a range of ARGV[10] (or its directory, then parts
                       "<prefix>u:<range>:<lowest ID>"): the users' records ("Record blobs" below states the format)
  "<prefix>r:<range>"  the range's hash of user records (field: decimal user ID): busy users' records, and
                       the layout before the blobs (read for users not in a blob, emptied as they are written)
  "<prefix>p:<page>"   a page block, read or written only for a page argument that names the page
Redis lets a script touch undeclared keys of its slot; declaring only KEYS[1] keeps a call's fixed cost
(Redis' per-key checks, the client's slot hashing) independent of how many pages it holds. While a slot
migrates, Redis redirects the call by KEYS[1] alone, so every undeclared key the call may read is touched
before anything is written, and the call answers TRYAGAIN when one is not on this node.
ARGV[1]  now: the caller's clock (ms); retention and TTLs are measured from it, never from `at`
ARGV[2]  at: the send time (ms) being decided; may be ahead of now (skew) or behind it (backfill)
ARGV[3]  mode: "count" records allowed sends, "peek" writes nothing; "+windows" appends each user's windows
ARGV[4]  identity: "<channel>:<campaign ID>"; an empty campaign ID is anonymous (no idempotency)
ARGV[5]  "1": exempt but counted (no cap is checked), "0": capped
ARGV[6]  horizon ms: the longest retention of any profile of the policy; a block compaction drops sends
         at or before now - horizon
ARGV[7]  caps of the call's profiles, msgpack: an array with per profile [windows ms[], maxima[],
         everyChannel[]] (everyChannel 1: counts every channel's sends, 0: this channel's)
ARGV[8]  retentions of each profile, ","-separated, each "<kept ms>:<window ms>": a user's sends at or
         before now - kept are dropped whenever the user is written; in a user record, sends at or before
         now - window move to the tail, which a call reads only for a duplicate or when a window around
         `at` reaches it (after a policy change) (a bare "<kept ms>" means both are the same)
ARGV[9]  the key prefix "<namespace>:cap:{<tag>}:" (KEYS[1] must be "<prefix>ids")
ARGV[10] the record ranges the call reads, ","-separated (S of them, decimal)
ARGV[11] the size in bytes past which a record blob splits
ARGV[11+p] page p: byte 1 the index (1..S) of its record range, byte 2 the path (1: block, 0: user
         records), bytes 3-5 the page number (user ID / 256, big endian), then per user 2 bytes: offset in
         the page (0..255) and profile number (0-based in ARGV[7]); offsets ascending, no repeats
Reply    one byte per user in argument order: 0 allowed (counted), 1 duplicate, 2 exempt (counted without
         checks), 3+i capped by cap i (0-based) of its profile. With "+windows", then a line per user in
         argument order, "<retry at> <used> <reset at> ...\n" with a pair per cap of its profile, as of the
         user's sends after the call (windowsLine() states what each figure is); its size is the number of
         caps, whatever the user's history.

Exactness: a send at `at` is allowed only if, for each cap (window W, max m), every window (x - W, x] that
contains `at` holds fewer than m counted sends, so sends stamped ahead of `at` count as well as sends
behind it.

Block value: cmsgpack of (format 4, width, compactAt, classLimit, identities, times, eventIdentities,
classes, userClasses): event e is (times[e], identities[eventIdentities[e]]); a class is a string of
`width`-byte event numbers; userClasses is 2 bytes per user (class number, 0 = no sends), or only 2 bytes
when every user of the page has that class (a dense campaign's page; format 4 always had 512). Numbers stay
stable between compactions, which happen when the event count reaches compactAt (never beyond what
`width` can hold) or the class count reaches classLimit.
]=]

-- The standard library's functions used everywhere, as locals. A function library's top level runs with only
-- the `redis` API in reach (Redis 7.0: `string` is not a global at load), so beginCall() sets them.
local byte, sub, char, floor, concat, unpackList, format -- per call (the same functions every call)

-- The library is loaded once per primary (FUNCTION LOAD) and every function below is defined then, not per
-- call. What a call is about lives in the locals declared bare below ("per call"): capSends() at the end
-- sets every one of them from the call's keys and arguments (beginCall()) before anything reads them, so
-- nothing of one call reaches the next. A per-call table declared bare fails loudly if a call forgets it.
local now, at, peek, withWindows, identity, channel, anonymous, exemptCounted, horizon -- per call
local identityTableKey, keyPrefix, callTag -- per call
-- the record ranges by index (a page argument's byte 1)
local rangeNames -- per call
local FIRST_PAGE_ARG = 11

local FORMAT, PAGE_USERS, MIN_COMPACT_AT, MIN_CLASS_LIMIT = 5, 256, 32, 256
local FUTURE_BOUND_MS = 300000
local REPLY_DUPLICATE, REPLY_EXEMPT, REPLY_FIRST_CAP = 1, 2, 3
-- the largest event count each width can number, and the compaction threshold kept under it
local WIDTH_LIMIT = { 255, 65535, 16777215 }

-- Profiles present in this call: caps, retention cutoff and retention (per call, by readProfiles()).
local profiles, profileCount -- per call

-- The caps come packed by cmsgpack (in C): parsing 64 profiles × 32 caps from text cost 2 ms of Lua string
-- matching, unpacking them costs a seventh. Returns an error reply, or nothing.
local function readProfiles(packedCaps, packedRetentions)
  profiles, profileCount = {}, 0
  local retentions, windowRetentions = {}, {}
  for retention, windowRetention in string.gmatch(packedRetentions, '(%d+):?(%d*)') do
    retentions[#retentions + 1] = tonumber(retention)
    windowRetentions[#retentions] = tonumber(windowRetention) or tonumber(retention)
  end
  local specs = cmsgpack.unpack(packedCaps)
  profileCount = #specs
  for index = 0, #specs - 1 do
    local spec = specs[index + 1]
    local windows, maxima, scopes = spec[1], spec[2], spec[3]
    -- least: the smallest max (a user with fewer sends than that is under every cap); longest: the longest window
    local everyChannel, least, longest = {}, math.huge, 0
    for cap = 1, #maxima do
      everyChannel[cap] = scopes[cap] == 1
      if maxima[cap] < least then least = maxima[cap] end
      if windows[cap] > longest then longest = windows[cap] end
    end
    local retention, windowRetention = retentions[index + 1], windowRetentions[index + 1]
    if retention == nil then return redis.error_reply('ERR cap-sends: no retention for profile ' .. index) end
    profiles[index] = {
      windows = windows, maxima = maxima, everyChannel = everyChannel, least = least, longest = longest,
      retention = retention, cutoff = now - retention, windowCutoff = now - math.min(windowRetention, retention),
    }
  end
end

-- whether an identity's send is on the call's channel, worked out once per identity per call
local onCallChannel -- per call
local function isOnCallChannel(someIdentity)
  local known = onCallChannel[someIdentity]
  if known == nil then
    known = string.match(someIdentity, '^[^:]*') == channel
    onCallChannel[someIdentity] = known
  end
  return known
end

-- Whether some window (x - window, x] containing `at` holds `max` of the sorted times near[1..count] (the
-- sends of one cap's channel(s) after max(at - window, cutoff) and before at + window). windowsLine() reports
-- the same windows by fullestAround(); test/integration/frequency-windows.test.ts holds both to one reference.
local function fullWindow(near, count, window, max)
  table.sort(near)
  -- the windows (x - W, x] containing `at` have x in [at, at + W); the count only rises at x = at and at a
  -- send's time, so those are the right ends to try
  local rightEnd, first, last, nextSend = at, 1, 0, 1
  while true do
    while last < count and near[last + 1] <= rightEnd do last = last + 1 end
    while first <= count and near[first] <= rightEnd - window do first = first + 1 end
    if last - first + 1 >= max then return true end
    while nextSend <= count and near[nextSend] <= rightEnd do nextSend = nextSend + 1 end
    if nextSend > count then return false end
    rightEnd = near[nextSend]
  end
end

-- The reply code for a user of `profile` whose sends are given by event: times[events[i]], and
-- onChannel[events[i]] / isMine[events[i]] (`events` nil: the sends are 1..n themselves). Sends at or before
-- the profile's cutoff do not count. Cost: a pass over the sends per cap, and a sort of the sends near `at`
-- only for a cap they could fill; a user with fewer sends than the profile's smallest max needs no pass.
local function decideSends(profile, n, events, times, onChannel, isMine, anyMine)
  local cutoff = profile.cutoff
  if anyMine and not anonymous then
    for i = 1, n do
      local e = events and events[i] or i
      if isMine[e] and times[e] > cutoff then return REPLY_DUPLICATE end
    end
  end
  if exemptCounted then return REPLY_EXEMPT end
  if n < profile.least then return 0 end
  local windows, maxima, everyChannel = profile.windows, profile.maxima, profile.everyChannel
  for cap = 1, #windows do
    local window, max = windows[cap], maxima[cap]
    if max == 0 then return REPLY_FIRST_CAP + cap - 1 end
    if n >= max then
      local from, to, every = at - window, at + window, everyChannel[cap]
      if cutoff > from then from = cutoff end
      -- counted first: the sends are gathered (and sorted) only when they could fill a window
      local count = 0
      for i = 1, n do
        local e = events and events[i] or i
        local t = times[e]
        if t > from and t < to and (every or onChannel[e]) then count = count + 1 end
      end
      if count >= max then
        local near = {}
        count = 0
        for i = 1, n do
          local e = events and events[i] or i
          local t = times[e]
          if t > from and t < to and (every or onChannel[e]) then
            count = count + 1
            near[count] = t
          end
        end
        if fullWindow(near, count, window, max) then return REPLY_FIRST_CAP + cap - 1 end
      end
    end
  end
  return 0
end

-- The reply code for a user of `profile` whose live sends are given (times, onChannel, isMine; n of them), or
-- read in place from a user record (times.inPlace: liveSends() states when) by decideInPlace(), defined below.
local decideInPlace
local function decide(profile, n, times, onChannel, isMine)
  if times.inPlace then return decideInPlace(profile, n, times) end
  return decideSends(profile, n, nil, times, onChannel, isMine, true)
end

-- Identity numbers of user records, read once per call.
local identityByNumber, myNumber -- per call
local function identityOfNumber(number)
  local known = identityByNumber[number]
  if known == nil then
    known = redis.call('HGET', identityTableKey, 'n:' .. number) or false
    identityByNumber[number] = known
  end
  return known
end
-- An identity is dropped once no kept send can name it: unused (no send of it written) for the horizon, plus
-- the 5 minutes a send may be stamped ahead of the clock that wrote it, plus 1 for the clocks of callers.
local IDENTITY_MARGIN_MS = 6 * 60000
-- numbers looked at per number given: the sweep moves faster than numbers are given, so it keeps coming round
local IDENTITY_SWEEP = 3
-- Looks at the next IDENTITY_SWEEP numbers of the sweep and drops those unused for long enough. The sweep
-- goes round the numbers from "floor" (below it every number is dropped) to the newest, so a round costs
-- what the live identities cost, not every number ever given. A number with no "t:" (written before
-- last-use times were kept) gets one now, so it waits a whole horizon too.
local function sweepIdentities(newest)
  local state = redis.call('HMGET', identityTableKey, 'sweep', 'floor')
  local floor = tonumber(state[2] or nil) or 1
  local from = math.max(tonumber(state[1] or nil) or 1, floor)
  if from >= newest then from = floor end
  local fields = {}
  for number = from, from + IDENTITY_SWEEP - 1 do
    fields[#fields + 1] = 'n:' .. number
    fields[#fields + 1] = 't:' .. number
  end
  local found = redis.call('HMGET', identityTableKey, unpackList(fields))
  local stale, writes = {}, {}
  for i = 1, IDENTITY_SWEEP do
    local number, name, used = from + i - 1, found[2 * i - 1], tonumber(found[2 * i] or nil)
    local gone = not name and number < newest
    if name and used == nil then
      writes[#writes + 1] = 't:' .. number
      writes[#writes + 1] = now
    elseif name and used + horizon + IDENTITY_MARGIN_MS < now then
      stale[#stale + 1] = 'i:' .. name
      stale[#stale + 1] = 'n:' .. number
      stale[#stale + 1] = 't:' .. number
      gone = true
    end
    if gone and number == floor then floor = number + 1 end
  end
  if #stale > 0 then redis.call('HDEL', identityTableKey, unpackList(stale)) end
  writes[#writes + 1] = 'sweep'
  writes[#writes + 1] = from + IDENTITY_SWEEP
  writes[#writes + 1] = 'floor'
  writes[#writes + 1] = floor
  redis.call('HSET', identityTableKey, unpackList(writes))
end

-- whether this call wrote a send of its identity into a user record (its "t:" is then set once, at the end)
local myNumberWritten -- per call
local function myIdentityNumber(create)
  if myNumber == nil then
    myNumber = tonumber(redis.call('HGET', identityTableKey, 'i:' .. identity) or nil) or false
  end
  if not myNumber and create then
    myNumber = redis.call('HINCRBY', identityTableKey, 'next', 1)
    redis.call('HSET', identityTableKey, 'i:' .. identity, myNumber, 'n:' .. myNumber, identity)
    identityByNumber[myNumber] = identity
    sweepIdentities(myNumber)
  end
  if create then myNumberWritten = true end
  return myNumber
end

-- A user record (format 2): a header byte 128 + 8 × (window number width - 1) + tail number width (0: no
-- tail); with a tail, a varint count of window sends; the window part; then the tail if any.
--   The window part holds the sends the user's windows may need, ascending by time: a 6-byte time and a
--   fixed-width identity number each, so a call finds the sends near `at` by binary search and a duplicate
--   by string.find, and decodes nothing else. Without a tail its count is its length / (6 + width).
--   The tail holds the older sends the retention still keeps (for idempotency, and for windows that a
--   policy change lengthened): a varint count, the first, last and newest time (6 bytes each), the identity
--   numbers (fixed width), then the times after the first as zigzag varint deltas, decoded only for a hit,
--   for the expired prefix a write drops, and when some window around `at` reaches the newest.
-- A value whose first byte is under 128 is the format before (6-byte time + varint number each, in write
-- order; a time before the year 6000 starts under 128): read into the same shape.
local function readVarint(value, position)
  local number, scale = 0, 1
  while true do
    local b = byte(value, position)
    position = position + 1
    number = number + (b % 128) * scale
    if b < 128 then return number, position end
    scale = scale * 128
  end
end
local function varint(number)
  if number < 128 then return char(number) end
  local tail = {}
  repeat
    local low = number % 128
    number = (number - low) / 128
    tail[#tail + 1] = number > 0 and low + 128 or low
  until number == 0
  return char(unpackList(tail))
end
local function readTime(value, position)
  local b1, b2, b3, b4, b5, b6 = byte(value, position, position + 5)
  return ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6
end
local function timeBytes(t)
  local high, low = floor(t / 16777216), t % 16777216
  return char(floor(high / 65536), floor(high / 256) % 256, high % 256, floor(low / 65536), floor(low / 256) % 256,
    low % 256)
end
local function fixedNumber(number, width)
  if width == 1 then return char(number) end
  if width == 2 then return char(floor(number / 256), number % 256) end
  if width == 3 then return char(floor(number / 65536), floor(number / 256) % 256, number % 256) end
  return char(floor(number / 16777216), floor(number / 65536) % 256, floor(number / 256) % 256, number % 256)
end
local function readFixed(value, position, width)
  local n = 0
  for k = position, position + width - 1 do n = n * 256 + byte(value, k) end
  return n
end
local function widthOf(number)
  if number < 256 then return 1 elseif number < 65536 then return 2 elseif number < 16777216 then return 3 end
  return 4
end

-- Window sends { time, number }, ascending, as window-part bytes of `width`-byte numbers.
local function windowBytes(sends, width)
  local parts = {}
  for i, send in ipairs(sends) do parts[i] = timeBytes(send[1]) .. fixedNumber(send[2], width) end
  return concat(parts)
end

local function parseTail(value, position, width)
  local count, at = readVarint(value, position)
  local idsAt = at + 18
  return { width = width, count = count, first = readTime(value, at), last = readTime(value, at + 6),
    newest = readTime(value, at + 12), ids = sub(value, idsAt, idsAt + count * width - 1),
    deltas = sub(value, idsAt + count * width) }
end

-- { value, width, stride, start, count, tail = { width, count, first, last, ids, deltas } or nil }: the
-- window part is read in place (send i at start + (i - 1) * stride).
local function readRecord(value)
  local header = byte(value, 1)
  if header < 128 then
    local sends, position, width = {}, 1, 1
    while position <= #value do
      local t = readTime(value, position)
      local number
      number, position = readVarint(value, position + 6)
      sends[#sends + 1] = { t, number }
      width = math.max(width, widthOf(number))
    end
    table.sort(sends, function(a, b) return a[1] < b[1] end)
    return { value = windowBytes(sends, width), width = width, stride = 6 + width, start = 1, count = #sends }
  end
  local width, tailWidth = floor((header - 128) / 8) + 1, header % 8
  local stride = 6 + width
  local count, start = (#value - 1) / stride, 2
  if tailWidth > 0 then count, start = readVarint(value, 2) end
  local record = { value = value, width = width, stride = stride, start = start, count = count }
  if tailWidth > 0 then record.tail = parseTail(value, start + count * stride, tailWidth) end
  return record
end
local function sendTime(record, i) return readTime(record.value, record.start + (i - 1) * record.stride) end
local function sendNumber(record, i)
  return readFixed(record.value, record.start + (i - 1) * record.stride + 6, record.width)
end
-- The first window send later than `t` (count + 1 when none is): a binary search, after a look at both ends
-- (most calls ask for a time before every send or after every send: one read each, whatever the count).
local function firstAfter(record, t)
  local count = record.count
  if count == 0 or sendTime(record, 1) > t then return 1 end
  if sendTime(record, count) <= t then return count + 1 end
  local low, high = 2, count
  while low < high do
    local middle = floor((low + high) / 2)
    if sendTime(record, middle) > t then high = middle else low = middle + 1 end
  end
  return low
end
-- Whether the window part holds a send of identity `number` later than `cutoff` (string.find, then the
-- hit's offset and time checked).
local function windowHas(record, number, cutoff)
  if widthOf(number) > record.width then return false end
  local pattern, value, start, stride = fixedNumber(number, record.width), record.value, record.start, record.stride
  local stop, from = start + record.count * stride - 1, start + 6
  while true do
    local found = string.find(value, pattern, from, true)
    if not found or found > stop then return false end
    local offset = found - start - 6
    if offset % stride == 0 and sendTime(record, offset / stride + 1) > cutoff then return true end
    from = found + 1
  end
end

-- The tail's times in order, as far as entry `upTo` (all without it).
local function tailTimes(tail, upTo)
  local times, t, position = { tail.first }, tail.first, 1
  for i = 2, math.min(upTo or tail.count, tail.count) do
    local zigzag
    zigzag, position = readVarint(tail.deltas, position)
    t = t + (zigzag % 2 == 0 and zigzag / 2 or -(zigzag + 1) / 2)
    times[i] = t
  end
  return times
end

-- Whether the tail holds a send of identity `number` newer than `cutoff`: string.find on the fixed-width
-- numbers, and a time decoded only on a hit.
local function tailHas(tail, number, cutoff)
  if not tail or widthOf(number) > tail.width then return false end
  local pattern, width, from = fixedNumber(number, tail.width), tail.width, 1
  while true do
    local found = string.find(tail.ids, pattern, from, true)
    if not found then return false end
    if (found - 1) % width == 0 then
      local entry = (found - 1) / width + 1
      if tailTimes(tail, entry)[entry] > cutoff then return true end
    end
    from = found + 1
  end
end

-- Every send of a record, window part and tail, as { time, identity number } (a block absorbing it).
local function allSends(record)
  local sends = {}
  for i = 1, record.count do sends[i] = { sendTime(record, i), sendNumber(record, i) } end
  local tail = record.tail
  if tail then
    local times = tailTimes(tail)
    for i = 1, tail.count do sends[#sends + 1] = { times[i], readFixed(tail.ids, (i - 1) * tail.width + 1, tail.width) } end
  end
  return sends
end

-- The tail after dropping its entries at or before `cutoff` from the front (entries are appended in about
-- time order; one left behind a newer one is dropped later, and tailHas() checks its time) and appending
-- `moved` ({ time, number } each); nil when empty.
local function tailAfter(tail, cutoff, moved)
  local width, count, first, last, newest, ids, deltas = 1, 0, nil, nil, 0, '', ''
  if tail then
    width, count, last, newest = tail.width, tail.count, tail.last, tail.newest
    local t, position, dropped = tail.first, 1, 0
    while dropped < count and t <= cutoff do
      dropped = dropped + 1
      if dropped < count then
        local zigzag
        zigzag, position = readVarint(tail.deltas, position)
        t = t + (zigzag % 2 == 0 and zigzag / 2 or -(zigzag + 1) / 2)
      end
    end
    count = count - dropped
    if count > 0 then
      first = t
      ids = sub(tail.ids, dropped * width + 1)
      deltas = sub(tail.deltas, position)
    end
  end
  local added, addedDeltas = {}, {}
  for _, send in ipairs(moved) do
    local t, number = send[1], send[2]
    if widthOf(number) > width then
      -- a number wider than the tail's: widen the stored ones (added ones are encoded at the end)
      local wider, numbers = widthOf(number), {}
      for q = 1, #ids, width do numbers[#numbers + 1] = fixedNumber(readFixed(ids, q, width), wider) end
      ids = concat(numbers)
      width = wider
    end
    if count == 0 then
      first = t
    else
      local delta = t - last
      addedDeltas[#addedDeltas + 1] = varint(delta >= 0 and 2 * delta or -2 * delta - 1)
    end
    last = t
    if t > newest then newest = t end
    count = count + 1
    added[#added + 1] = number
  end
  if count == 0 then return nil end
  for i, number in ipairs(added) do added[i] = fixedNumber(number, width) end
  return { width = width, count = count, first = first, last = last, newest = newest, ids = ids .. concat(added),
    deltas = deltas .. concat(addedDeltas) }
end

-- The record after a send (t, number) is counted for a user of `profile`: window sends at or before the
-- profile's window cutoff leave the window part for the tail (while the retention keeps them), and the send
-- is inserted in time order.
local function recordWith(record, profile, t, number)
  local width, keptBytes, keptCount, moved = widthOf(number), '', 0, {}
  local tail
  if record then
    local from = firstAfter(record, profile.windowCutoff)
    for i = firstAfter(record, profile.cutoff), from - 1 do moved[#moved + 1] = { sendTime(record, i), sendNumber(record, i) } end
    keptCount = record.count - from + 1
    keptBytes = sub(record.value, record.start + (from - 1) * record.stride, record.start + record.count * record.stride - 1)
    if width > record.width then
      local sends = {}
      for i = from, record.count do sends[#sends + 1] = { sendTime(record, i), sendNumber(record, i) } end
      keptBytes = windowBytes(sends, width)
    else
      width = record.width
    end
    tail = record.tail
  end
  -- kept sends at or before t stay in front of it (most sends arrive in time order: low ends at keptCount, so
  -- the last one is looked at first)
  local stride = 6 + width
  local low, high = 0, keptCount
  if keptCount > 0 and readTime(keptBytes, (keptCount - 1) * stride + 1) <= t then low = keptCount end
  while low < high do
    local middle = floor((low + high + 1) / 2)
    if readTime(keptBytes, (middle - 1) * stride + 1) <= t then low = middle else high = middle - 1 end
  end
  local window = sub(keptBytes, 1, low * stride) .. timeBytes(t) .. fixedNumber(number, width) ..
    sub(keptBytes, low * stride + 1)
  tail = tailAfter(tail, profile.cutoff, moved)
  if not tail then return char(128 + 8 * (width - 1)) .. window end
  return char(128 + 8 * (width - 1) + tail.width) .. varint(keptCount + 1) .. window .. varint(tail.count) ..
    timeBytes(tail.first) .. timeBytes(tail.last) .. timeBytes(tail.newest) .. tail.ids .. tail.deltas
end

-- Fixed-width event numbers inside a class string. string.byte and string.char do the bytes in C, in
-- slices that stay within Lua's C stack limit (a class can hold thousands of sends).
local SLICE = 3000
local function bytesOf(text)
  local length = #text
  if length <= SLICE then return { byte(text, 1, length) } end
  local bytes = {}
  for first = 1, length, SLICE do
    local slice = { byte(text, first, math.min(first + SLICE - 1, length)) }
    local base = first - 1
    for i = 1, #slice do bytes[base + i] = slice[i] end
  end
  return bytes
end
local function charsOf(bytes)
  local count = #bytes
  if count <= SLICE then return char(unpackList(bytes, 1, count)) end
  local parts = {}
  for first = 1, count, SLICE do parts[#parts + 1] = char(unpackList(bytes, first, math.min(first + SLICE - 1, count))) end
  return concat(parts)
end
local function encodeNumber(number, width)
  if width == 1 then return char(number) end
  if width == 2 then return char(floor(number / 256), number % 256) end
  return char(floor(number / 65536), floor(number / 256) % 256, number % 256)
end
local function eventsOfClass(history, width)
  local bytes = bytesOf(history)
  if width == 1 then return bytes end
  local numbers = {}
  if width == 2 then
    for q = 1, #bytes, 2 do numbers[#numbers + 1] = bytes[q] * 256 + bytes[q + 1] end
  else
    for q = 1, #bytes, 3 do numbers[#numbers + 1] = (bytes[q] * 256 + bytes[q + 1]) * 256 + bytes[q + 2] end
  end
  return numbers
end
local function encodeClass(numbers, width)
  if width == 1 then return charsOf(numbers) end
  local bytes, k = {}, 0
  for i = 1, #numbers do
    local number = numbers[i]
    if width == 3 then
      bytes[k + 1] = floor(number / 65536)
      k = k + 1
    end
    bytes[k + 1], bytes[k + 2] = floor(number / 256) % 256, number % 256
    k = k + 2
  end
  return charsOf(bytes)
end

-- `text` repeated `count` times, by doubling (string.rep adds one byte at a time: 2 µs for a page's class bytes),
-- once per call: the pages of a dense call repeat the same reply code and class bytes
local repeatedOf -- per call
local function repeated(text, count)
  local byText = repeatedOf[count]
  if byText == nil then
    byText = {}
    repeatedOf[count] = byText
  end
  local result = byText[text]
  if result then return result end
  local part, left = text, count
  result = ''
  while left > 0 do
    if left % 2 == 1 then result = result .. part end
    left = floor(left / 2)
    if left > 0 then part = part .. part end
  end
  byText[text] = result
  return result
end

local function emptyBlock()
  return { width = 1, compactAt = MIN_COMPACT_AT, classLimit = MIN_CLASS_LIMIT, identities = {}, times = {},
    eventIdentities = {}, classes = {}, userClasses = repeated('\0\0', PAGE_USERS) }
end
local function readBlock(key)
  local blob = redis.call('GET', key)
  if not blob then return nil end
  local format, width, compactAt, classLimit, identities, times, eventIdentities, classes, userClasses =
    cmsgpack.unpack(blob)
  if format ~= FORMAT and format ~= 4 then return redis.error_reply('ERR cap-sends: unknown block format in ' .. key) end
  -- one class for the whole page: the page's bytes are the same string at every page of the call
  if #userClasses == 2 then userClasses = repeated(userClasses, PAGE_USERS) end
  return { width = width, compactAt = compactAt, classLimit = classLimit, identities = identities,
    times = times, eventIdentities = eventIdentities, classes = classes, userClasses = userClasses }
end

-- Drops unused classes, and when the event count reached its threshold, also the events no user's class
-- refers to or older than now - horizon, renumbered by first use, with the identities and classes they need
-- (the narrowest width for the count). `users` (the page's class bytes, 2 per user) is rewritten in place.
-- Cost: one pass over the page's 256 users, and for an event compaction each class's bytes once, in C.
local function compact(block, users)
  if #block.times < block.compactAt then
    -- classes only: histories keep their bytes, only their numbers change
    local classMap, classes = { [0] = 0 }, {}
    for o = 1, 2 * PAGE_USERS - 1, 2 do
      local class = users[o] * 256 + users[o + 1]
      local renumbered = classMap[class]
      if renumbered == nil then
        classes[#classes + 1] = block.classes[class]
        renumbered = #classes
        classMap[class] = renumbered
      end
      users[o], users[o + 1] = floor(renumbered / 256), renumbered % 256
    end
    block.classes = classes
    block.classLimit = math.max(MIN_CLASS_LIMIT, #classes + floor(#classes / 2))
    return
  end
  local eventMap, identityMap, kept = {}, {}, { [0] = false }
  local identities, times, eventIdentities, classes, classIndex = {}, {}, {}, {}, {}
  local cutoff = now - horizon
  local oldTimes, oldEventIdentities, oldIdentities = block.times, block.eventIdentities, block.identities
  for o = 1, 2 * PAGE_USERS - 1, 2 do
    local class = users[o] * 256 + users[o + 1]
    if kept[class] == nil then
      local parts = {}
      local numbers = eventsOfClass(block.classes[class], block.width)
      for i = 1, #numbers do
        local e = numbers[i]
        local newEvent = eventMap[e]
        if newEvent == nil then
          newEvent = false
          local t = oldTimes[e]
          if t > cutoff then
            local oldIdentity = oldEventIdentities[e]
            local newIdentity = identityMap[oldIdentity]
            if newIdentity == nil then
              identities[#identities + 1] = oldIdentities[oldIdentity]
              newIdentity = #identities
              identityMap[oldIdentity] = newIdentity
            end
            times[#times + 1] = t
            eventIdentities[#eventIdentities + 1] = newIdentity
            newEvent = #times
          end
          eventMap[e] = newEvent
        end
        if newEvent then parts[#parts + 1] = newEvent end
      end
      kept[class] = parts
    end
  end
  local width = #times < 128 and 1 or (#times < 30000 and 2 or 3)
  local classMap = { [0] = 0 }
  for o = 1, 2 * PAGE_USERS - 1, 2 do
    local class = users[o] * 256 + users[o + 1]
    local renumbered = classMap[class]
    if renumbered == nil then
      renumbered = 0
      local parts = kept[class]
      if parts and #parts > 0 then
        local history = encodeClass(parts, width)
        renumbered = classIndex[history]
        if renumbered == nil then
          classes[#classes + 1] = history
          renumbered = #classes
          classIndex[history] = renumbered
        end
      end
      classMap[class] = renumbered
    end
    users[o], users[o + 1] = floor(renumbered / 256), renumbered % 256
  end
  block.identities, block.times, block.eventIdentities, block.classes = identities, times, eventIdentities, classes
  block.width = width
  block.compactAt = math.min(math.max(MIN_COMPACT_AT, 2 * #times), WIDTH_LIMIT[width])
  block.classLimit = math.max(MIN_CLASS_LIMIT, #classes + floor(#classes / 2))
end

local function classesOfUsers(userClasses)
  local bytes, classOfUser = { byte(userClasses, 1, 2 * PAGE_USERS) }, {}
  for offset = 0, PAGE_USERS - 1 do classOfUser[offset] = bytes[2 * offset + 1] * 256 + bytes[2 * offset + 2] end
  return classOfUser
end
-- The TTL a key needs for sends kept `retention` after now, the send at `at` included.

local function ttlFor(retention)
  return retention + math.min(FUTURE_BOUND_MS, math.max(0, at - now))
end
local function extendTtl(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
-- The identity table's TTL is extended by an eighth more than needed: every call that writes a block or a record
-- needs it to outlive them, and with the clock moving a call would otherwise rewrite it (a replicated PEXPIRE)
-- every time; so only a call an eighth of the retention later does. Its identities and markers outlive what
-- uses them by that much at most.
local function extendTableTtl(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl + floor(ttl / 8)) end
end

-- The reply: codes as numbers in `reply`, moved into `replyParts` as a string before a page adds a string of codes.
local reply, replyParts, windowLines -- per call
local function flushReply()
  -- string.char takes the codes in slices that stay within Lua's stack limit
  for first = 1, #reply, 4000 do
    replyParts[#replyParts + 1] = char(unpackList(reply, first, math.min(first + 3999, #reply)))
  end
  reply = {}
end
local function appendReply(codes)
  if #reply > 0 then flushReply() end
  replyParts[#replyParts + 1] = codes
end
-- The inside of a Lua pattern set matching the bytes `numbers` (ascending, 1..255): runs of 3 or more as
-- ranges (events numbered in time order make a window's events one range, matched by one comparison per
-- byte), other bytes one by one, non-alphanumeric ones escaped with %. A range never starts or ends at a
-- byte the set syntax gives a meaning to (% ] ^ -).
local SET_SPECIAL = { [37] = true, [93] = true, [94] = true, [45] = true }
local function patternSet(numbers)
  local parts, i = {}, 1
  while i <= #numbers do
    local first = numbers[i]
    local last, j = first, i
    if not SET_SPECIAL[first] then
      while j < #numbers and numbers[j + 1] == last + 1 and not SET_SPECIAL[last + 1] do
        j = j + 1
        last = numbers[j]
      end
    end
    if last - first >= 2 then
      parts[#parts + 1] = char(first) .. '-' .. char(last)
      i = j + 1
    else
      local c = char(first)
      parts[#parts + 1] = string.find(c, '%w') and c or '%' .. c
      i = i + 1
    end
  end
  return concat(parts)
end

-- whether a page argument's (offset, profile) pairs hold profile `number` (a byte at an odd position from 7)
local function isProfileOf(spec, number)
  local key, from = char(number), 7
  while true do
    local found = string.find(spec, key, from, true)
    if found == nil then return false end
    if found % 2 == 1 then return true end
    from = found + 1
  end
end
-- whether some user of a page has a record (`records`: readPageRecords())
local function anyRecord(records)
  if records == nil then return false end
  for i = 1, #records do
    if records[i] then return true end
  end
  return false
end
-- Record blobs: the user records of a range live in one string, "<prefix>u:<range>", read once (GET) and
-- written once (SET) per call. A sparse campaign's users hold the same record bytes, so a blob stores
-- each distinct record (a class) once:
--   byte 1       1 (records)
--   bytes 2-4    the user count n; bytes 5-7 the class count c; bytes 8-10 the classes live at the last
--                rebuild (a rebuild, which drops classes no user holds, comes when c reaches twice that + 16)
--   n × 4 bytes  user IDs, ascending (binary search)
--   n × 3 bytes  each user's class number (1..c)
--   c × 4 bytes  where each class's record ends in the class data (the first starts at 0)
--   class data   the records, in the user-record format (readRecord())
-- A call edits a blob with slices of the old string (table.concat): users not in the call cost no Lua.
-- A blob past ARGV[11] bytes splits by ID at its median user: "<prefix>u:<range>" becomes a directory
-- (byte 1: 2, then 4 bytes per part: the lowest ID of the part, ascending, the first 0), and each part is
-- a blob "<prefix>u:<range>:<lowest ID>"; a part past the size splits the same way. The directory lives
-- at least as long as every part.
-- A record over BIG_RECORD_BYTES (a busy user's) stays a field of the hash "<prefix>r:<range>" (the layout
-- before the blobs, still read for every user not in a blob): rewriting it with every call of the range
-- would make the range's calls cost what the busy user's history costs. So does the record of a user a
-- "+windows" call (a single-user check) writes while it is not in a blob: a check then rewrites one field,
-- not its range's blob. A user is in one of the two; a write moves it where its new record belongs and
-- deletes it from the other (a campaign call moves a checked user into the blob).
local BLOB_RECORDS, BLOB_DIRECTORY, BLOB_HEADER, BIG_RECORD_BYTES = 1, 2, 10, 512
local blobSplitBytes -- per call

local function readBlobValue(key, low, value)
  local blob = { key = key, low = low, existed = value ~= false, value = value or '', n = 0, classes = 0,
    live = 0, positions = {}, found = {}, edits = {}, edited = false, classValues = {} }
  if value then
    blob.n, blob.classes, blob.live = readFixed(value, 2, 3), readFixed(value, 5, 3), readFixed(value, 8, 3)
  end
  blob.classNumbers = BLOB_HEADER + 1 + 4 * blob.n
  blob.ends = blob.classNumbers + 3 * blob.n
  blob.data = blob.ends + 4 * blob.classes
  return blob
end
local function blobClassValue(blob, class)
  local known = blob.classValues[class]
  if known == nil then
    local value, ends = blob.value, blob.ends
    local from = class == 1 and 0 or readFixed(value, ends + 4 * (class - 2), 4)
    known = sub(value, blob.data + from, blob.data + readFixed(value, ends + 4 * (class - 1), 4) - 1)
    blob.classValues[class] = known
  end
  return known
end
-- The record of user `id` in the blob (nil when it has none); where it is (or would go) kept for the write.
local function blobRecord(blob, id)
  local value, low, high = blob.value, 1, blob.n
  while low <= high do
    local middle = floor((low + high) / 2)
    local a, b, c, d = byte(value, BLOB_HEADER + 4 * middle - 3, BLOB_HEADER + 4 * middle)
    local found = ((a * 256 + b) * 256 + c) * 256 + d
    if found == id then
      blob.positions[id], blob.found[id] = middle, true
      return blobClassValue(blob, readFixed(value, blob.classNumbers + 3 * (middle - 1), 3))
    end
    if found < id then low = middle + 1 else high = middle - 1 end
  end
  blob.positions[id], blob.found[id] = low, false
  return nil
end
-- A blob's value built from scratch: ids ascending, each one's record; equal records stored once.
local function blobOf(ids, values)
  local classOf, classValues, ends, idParts, classParts, size = {}, {}, {}, {}, {}, 0
  for i = 1, #ids do
    local value = values[i]
    local class = classOf[value]
    if class == nil then
      class = #classValues + 1
      classValues[class], classOf[value] = value, class
      size = size + #value
      ends[class] = fixedNumber(size, 4)
    end
    idParts[i], classParts[i] = fixedNumber(ids[i], 4), fixedNumber(class, 3)
  end
  return char(BLOB_RECORDS) .. fixedNumber(#ids, 3) .. fixedNumber(#classValues, 3) ..
    fixedNumber(#classValues, 3) .. concat(idParts) .. concat(classParts) .. concat(ends) .. concat(classValues)
end
-- Every user of a blob value and its record (a rebuild or a split: the only per-user pass over a blob).
local function blobUsers(value)
  local blob = readBlobValue(nil, 0, value)
  local ids, values = {}, {}
  for i = 1, blob.n do
    ids[i] = readFixed(value, BLOB_HEADER + 4 * i - 3, 4)
    values[i] = blobClassValue(blob, readFixed(value, blob.classNumbers + 3 * (i - 1), 3))
  end
  return ids, values
end
-- The blob's value after the call's edits (user ID -> new record, or false: the user leaves): slices of the
-- old value between the edited users, the new records appended as classes (each distinct one once).
local function blobAfterEdits(blob)
  local edited = {}
  for id in pairs(blob.edits) do edited[#edited + 1] = id end
  table.sort(edited)
  local value, n, classes = blob.value, blob.n, blob.classes
  local dataSize = classes > 0 and readFixed(value, blob.ends + 4 * (classes - 1), 4) or 0
  local idParts, classParts, newEnds, newValues, newClassOf = {}, {}, {}, {}, {}
  local nextKept, count = 1, 0
  local function keep(upTo)
    if upTo >= nextKept then
      idParts[#idParts + 1] = sub(value, BLOB_HEADER + 4 * nextKept - 3, BLOB_HEADER + 4 * upTo)
      classParts[#classParts + 1] = sub(value, blob.classNumbers + 3 * (nextKept - 1), blob.classNumbers + 3 * upTo - 1)
      count = count + upTo - nextKept + 1
    end
  end
  for _, id in ipairs(edited) do
    local position, record = blob.positions[id], blob.edits[id]
    keep(position - 1)
    nextKept = blob.found[id] and position + 1 or position
    if record then
      local class = newClassOf[record]
      if class == nil then
        classes, dataSize = classes + 1, dataSize + #record
        class = classes
        newEnds[#newEnds + 1], newValues[#newValues + 1], newClassOf[record] = fixedNumber(dataSize, 4), record, class
      end
      idParts[#idParts + 1], classParts[#classParts + 1] = fixedNumber(id, 4), fixedNumber(class, 3)
      count = count + 1
    end
  end
  keep(n)
  return char(BLOB_RECORDS) .. fixedNumber(count, 3) .. fixedNumber(classes, 3) .. fixedNumber(blob.live, 3) ..
    concat(idParts) .. concat(classParts) .. sub(value, blob.ends, blob.data - 1) .. concat(newEnds) ..
    sub(value, blob.data) .. concat(newValues), count, classes
end

-- Per range of the call (a page argument's byte 1): its blob or directory and parts, its old-layout hash.
local ranges -- per call
-- The record of each user of the call (false: none) and the blob it is in or goes to; users whose record is
-- a field of the old-layout hash.
local records, blobOfUser, inHash -- per call

-- The lowest ID of the part that holds `id` (bounds: the directory's, ascending from 0).
local function partOf(bounds, id)
  local low, high = 1, #bounds
  while low < high do
    local middle = floor((low + high + 1) / 2)
    if bounds[middle] <= id then low = middle else high = middle - 1 end
  end
  return bounds[low]
end

-- Reads a range's blob (or directory and the parts of `ids`), its hash's existence, and the records of
-- `ids`. Refused keys (a slot migrating) return the error; nothing is written before every read is done.
local function readRange(hashIndex, ids)
  local range = ranges[hashIndex]
  local root = range.root
  local value = redis.pcall('GET', root)
  if type(value) == 'table' then return value end
  local exists = redis.pcall('EXISTS', range.hashKey)
  if type(exists) == 'table' then return exists end
  range.hashExists = exists == 1
  range.hasRecords = value and true or range.hashExists
  if range.hasRecords then
    for _, spec in ipairs(ids.blockPages) do
      local a, b, c = byte(spec, 3, 5)
      local pageBase = ((a * 256 + b) * 256 + c) * PAGE_USERS
      for u = 6, #spec, 2 do ids[#ids + 1] = pageBase + byte(spec, u) end
    end
  end
  if #ids == 0 then return end
  if value and byte(value, 1) == BLOB_DIRECTORY then
    local bounds, partKeys = {}, { root }
    for q = 2, #value, 4 do bounds[#bounds + 1] = readFixed(value, q, 4) end
    range.bounds, range.directoryValue = bounds, value
    for _, id in ipairs(ids) do
      local lowest = partOf(bounds, id)
      local part = range.parts[lowest]
      if part == nil then
        partKeys[#partKeys + 1] = root .. ':' .. lowest
        part = true
        range.parts[lowest] = part
      end
    end
    -- the parts read (after the same multi-key probe as the call's other keys: a slot migrating)
    local probe = redis.pcall('EXISTS', unpackList(partKeys))
    if type(probe) == 'table' then return probe end
    for q = 2, #partKeys do
      local key = partKeys[q]
      local lowest = tonumber(sub(key, #root + 2))
      range.parts[lowest] = readBlobValue(key, lowest, redis.call('GET', key))
    end
    for _, id in ipairs(ids) do blobOfUser[id] = range.parts[partOf(bounds, id)] end
  else
    local blob = readBlobValue(root, 0, value)
    range.parts[0] = blob
    for _, id in ipairs(ids) do blobOfUser[id] = blob end
  end
  local missing = {}
  for _, id in ipairs(ids) do
    local record = blobRecord(blobOfUser[id], id)
    records[id] = record or false
    if not record and range.hashExists then missing[#missing + 1] = id end
  end
  if #missing > 0 then
    local names = {}
    for i = 1, #missing do names[i] = format('%d', missing[i]) end
    local values = redis.call('HMGET', range.hashKey, unpackList(names))
    for i = 1, #missing do
      if values[i] then records[missing[i]], inHash[missing[i]] = values[i], true end
    end
  end
end

-- The user's record after the call (false: the user leaves, its sends absorbed by a page block), kept for
-- the writes at the end; `retention`: how long the record must live.
local function storeRecord(hashIndex, id, record, retention)
  local range = ranges[hashIndex]
  if retention > range.retention then range.retention = retention end
  local blob = blobOfUser[id]
  if record and (#record > BIG_RECORD_BYTES or (withWindows and not blob.found[id])) then
    range.hashWrites[#range.hashWrites + 1] = format('%d', id)
    range.hashWrites[#range.hashWrites + 1] = record
    if blob.found[id] then blob.edits[id], blob.edited = false, true end
    return
  end
  if inHash[id] then range.hashDeletes[#range.hashDeletes + 1] = format('%d', id) end
  if record or blob.found[id] then blob.edits[id], blob.edited = record, true end
end

-- A blob's new value written, rebuilt when dead classes piled up, split when past the size; returns the
-- lowest ID of a part split off (nil when none) and its value.
local function writeBlob(blob, ttl)
  local value, count, classes = blobAfterEdits(blob)
  local upper, upperValue
  if #value > blobSplitBytes and count >= 2 then
    local ids, values = blobUsers(value)
    local half = floor(count / 2)
    local lowIds, lowValues, highIds, highValues = {}, {}, {}, {}
    for i = 1, count do
      if i <= half then
        lowIds[i], lowValues[i] = ids[i], values[i]
      else
        highIds[i - half], highValues[i - half] = ids[i], values[i]
      end
    end
    value, upper, upperValue = blobOf(lowIds, lowValues), ids[half + 1], blobOf(highIds, highValues)
  elseif classes >= 2 * readFixed(value, 8, 3) + 16 then
    value = blobOf(blobUsers(value))
  end
  if blob.existed then ttl = math.max(ttl, redis.call('PTTL', blob.key)) end
  return value, ttl, upper, upperValue
end

-- The writes of a range: its blobs (and directory when one splits), the old-layout hash's fields.
local function writeRange(range, ttl)
  if #range.hashWrites > 0 then
    redis.call('HSET', range.hashKey, unpackList(range.hashWrites))
    extendTtl(range.hashKey, ttl)
  end
  if #range.hashDeletes > 0 then redis.call('HDEL', range.hashKey, unpackList(range.hashDeletes)) end
  local newBounds = {}
  local longest = 0
  for lowest, blob in pairs(range.parts) do
    if blob.edited then
      local value, blobTtl, upper, upperValue = writeBlob(blob, ttl)
      if blobTtl > longest then longest = blobTtl end
      if upper then
        if range.bounds == nil then
          -- the range's first split: its blob becomes the directory of two parts
          range.bounds = { 0 }
          blob.key = range.root .. ':0'
        end
        newBounds[#newBounds + 1] = upper
        redis.call('SET', range.root .. ':' .. upper, upperValue, 'PX', blobTtl)
      end
      redis.call('SET', blob.key, value, 'PX', blobTtl)
    end
  end
  if range.bounds == nil then return end
  if #newBounds > 0 then
    for _, lowest in ipairs(newBounds) do range.bounds[#range.bounds + 1] = lowest end
    table.sort(range.bounds)
    local parts = { char(BLOB_DIRECTORY) }
    for i, lowest in ipairs(range.bounds) do parts[i + 1] = fixedNumber(lowest, 4) end
    if range.directoryValue then longest = math.max(longest, redis.call('PTTL', range.root)) end
    redis.call('SET', range.root, concat(parts), 'PX', longest)
  elseif longest > 0 then
    extendTtl(range.root, longest)
  end
end

-- The user records of a block-path page's users (its page argument: offset, profile per user), by position, or nil
-- when none of them has one (read with the call's other records beforehand).
local function readPageRecords(hashIndex, pageBase, spec)
  if not ranges[hashIndex].hasRecords then return nil end
  local found, any = {}, false
  for u = 6, #spec, 2 do
    local record = records[pageBase + byte(spec, u)]
    found[#found + 1] = record
    if record then any = true end
  end
  return any and found or nil
end

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
    if identityByNumber[number] == nil and not unknown[number] then
      unknown[number] = true
      fields[#fields + 1] = number
    end
    q = q + stride
  end
  if #fields > 0 then
    local names = {}
    for i, number in ipairs(fields) do names[i] = string.format('n:%d', number) end
    local found = redis.call('HMGET', identityTableKey, unpackList(names))
    for i, number in ipairs(fields) do identityByNumber[number] = found[i] or false end
  end
  for i = 1, n - first do
    local sendIdentity = identityByNumber[numbers[i]] or ''
    onChannel[first + i], isMine[first + i] = isOnCallChannel(sendIdentity), sendIdentity == identity
  end
  return n
end

-- The window sends lo..hi of a record as an ascending list read in place: list[i] decodes one time on demand
-- (a binary search touches log n of them), nothing is copied. With `withAt`, the call's own send at `at` is
-- in the list too, after the sends at or before it. Fields: inPlace, record, lo, hi.
local function inPlaceList(record, lo, hi, withAt)
  local value, stride = record.value, record.stride
  local base = record.start + (lo - 2) * stride
  local atIndex = math.huge
  if withAt then atIndex = math.min(math.max(firstAfter(record, at), lo), hi + 1) - lo + 1 end
  local list = { inPlace = true, record = record, lo = lo, hi = hi }
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
-- without a campaign ID, or one campaign's resends).
local function countableInPlace(profile, record, lo, hi)
  local every = true
  for cap = 1, #profile.windows do every = every and profile.everyChannel[cap] end
  if every or hi < lo then return true end
  local number = sendNumber(record, lo)
  -- the call's own identity (its number is read with the records) is on its channel: no lookup
  local onChannel = number == myNumber or isOnCallChannel(identityOfNumber(number) or '')
  return onChannel and allOfNumber(record, lo, hi, number)
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
local scratchTimes, scratchOnChannel, scratchIsMine -- per call
local function liveSends(profile, block, class, record, onward)
  local times, onChannel, isMine, n = scratchTimes, scratchOnChannel, scratchIsMine, 0
  -- only the window sends some cap's window around `at` can hold (or every later one, `onward`): a binary
  -- search finds them, the rest is never decoded
  local reach = math.max(profile.cutoff, at - profile.longest)
  local before = onward and math.huge or at + profile.longest
  if record and not (block and class > 0) and not (record.tail and record.tail.newest > reach) then
    local lo = firstAfter(record, reach)
    local hi = math.max(onward and record.count or firstAfter(record, before - 1) - 1, lo - 1)
    if countableInPlace(profile, record, lo, hi) then times, n = inPlaceList(record, lo, hi, false), hi - lo + 1 end
  end
  if block and class > 0 then
    for _, e in ipairs(eventsOfClass(block.classes[class], block.width)) do
      local t = block.times[e]
      if t > profile.cutoff then
        local eventIdentity = block.identities[block.eventIdentities[e]]
        n = n + 1
        times[n], onChannel[n], isMine[n] = t, isOnCallChannel(eventIdentity), eventIdentity == identity
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
          times[n], onChannel[n], isMine[n] = t, isOnCallChannel(sendIdentity), sendIdentity == identity
        end
      end
    end
  end
  -- a send of this identity anywhere in the record (window part or tail) makes it a duplicate, even where
  -- no cap's window around `at` reaches it (a channel the segment does not cap has no window at all)
  if record and not anonymous then
    local mine = myIdentityNumber(false)
    if mine and (windowHas(record, mine, profile.cutoff) or tailHas(record.tail, mine, profile.cutoff)) then
      return n, times, onChannel, isMine, true
    end
  end
  return n, times, onChannel, isMine, false
end

-- How many of list[1..count] (ascending) are at or before t: a binary search, after a look at both ends
-- (a window around `at` mostly starts before every send and ends after every one).
local function countUpTo(list, count, t)
  if count == 0 or list[1] > t then return 0 end
  if list[count] <= t then return count end
  local low, high = 2, count
  while low < high do
    local middle = floor((low + high) / 2)
    if list[middle] > t then high = middle else low = middle + 1 end
  end
  return low - 1
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

-- The reply code for a user of `profile` whose n live sends are the inPlaceList() `list` (liveSends()), by the
-- rule of decideSends(): a cap is full when its fullest window around `at` holds its max (fullWindow()'s rule),
-- found by binary searches.
decideInPlace = function(profile, n, list)
  if exemptCounted then return REPLY_EXEMPT end
  if n < profile.least then return 0 end
  local windows, maxima = profile.windows, profile.maxima
  for cap = 1, #windows do
    local max = maxima[cap]
    if max == 0 or (n >= max and fullestAround(list, n, at, windows[cap]) >= max) then return REPLY_FIRST_CAP + cap - 1 end
  end
  return 0
end

-- The "+windows" line of a user whose sends after the call are times[1..n] (onChannel in step), with the
-- call's send at `at` when `appended`: "<retry at>", then per cap of its profile "<used> <reset at>":
--   used: the sends in the cap's fullest window (x - W, x] containing `at` (decide()'s rule);
--   reset at: when that window's oldest send ages out (its time + W), `at` when it holds none;
--   retry at (0 unless capped, and then 0 when a cap of 0 means never): the earliest time after `at` at
--   which every window around it has room. A window around x empties only as a send leaves it at t + W,
--   so those times are the candidates, tried in order with fullestAround() itself.
-- Cost: binary searches per cap over an inPlaceList() (liveSends()), or else a sort of the sends gathered for
-- the decision (two lists at most: the channel's, every channel's); the reply holds numbers per cap only.
local function windowsLine(profile, n, times, onChannel, appended, capped)
  local listOf, countOf = {}, {}
  local function listFor(every)
    local key = every and 2 or 1
    local list = listOf[key]
    if list == nil and times.inPlace then
      -- read in place: the same sorted sends for every cap (liveSends() made sure)
      list = inPlaceList(times.record, times.lo, times.hi, appended)
      listOf[1], listOf[2], countOf[1], countOf[2] = list, list, n + (appended and 1 or 0), n + (appended and 1 or 0)
    elseif list == nil then
      list = {}
      local count = 0
      for i = 1, n do
        if every or onChannel[i] then
          count = count + 1
          list[count] = times[i]
        end
      end
      if appended then
        count = count + 1
        list[count] = at
      end
      table.sort(list)
      listOf[key], countOf[key] = list, count
    end
    return list, countOf[key]
  end
  local windows, maxima, everyChannel = profile.windows, profile.maxima, profile.everyChannel
  local line = {}
  for cap = 1, #windows do
    local window = windows[cap]
    local list, count = listFor(everyChannel[cap])
    local used, oldest = fullestAround(list, count, at, window)
    line[cap + 1] = string.format('%d %.0f', used, used > 0 and list[oldest] + window or at)
  end
  local retryAt = 0
  if capped then
    local never = false
    for cap = 1, #windows do never = never or maxima[cap] == 0 end
    if not never then
      -- No x below `lowest` is allowed: its window (x - W, x] still holds every send after x - W up to `at`,
      -- which for x below list[j] + W (j: the max-th send at or before `at`, counted back) are max or more.
      -- So each cap's candidates start there, and they are tried in ascending order by merging the caps'
      -- ascending lists: a capped check costs binary searches, not a pass over the sends of its windows.
      local lowest, nextOf = at + 1, {}
      for cap = 1, #windows do
        local list, count = listFor(everyChannel[cap])
        local j = countUpTo(list, count, at) - maxima[cap] + 1
        if j >= 1 and list[j] + windows[cap] > lowest then lowest = list[j] + windows[cap] end
      end
      for cap = 1, #windows do
        local window = windows[cap]
        local list, count = listFor(everyChannel[cap])
        nextOf[cap] = math.max(countUpTo(list, count, at - window), countUpTo(list, count, lowest - window - 1)) + 1
      end
      retryAt = at + 1 -- not reached: after the last candidate every window is empty
      local tried
      while true do
        local x, from
        for cap = 1, #windows do
          local list, count = listFor(everyChannel[cap])
          local i = nextOf[cap]
          if i <= count and (x == nil or list[i] + windows[cap] < x) then x, from = list[i] + windows[cap], cap end
        end
        if x == nil then break end
        nextOf[from] = nextOf[from] + 1
        if x ~= tried then
          tried = x
          local allowed = true
          for cap = 1, #windows do
            local list, count = listFor(everyChannel[cap])
            if fullestAround(list, count, x, windows[cap]) >= maxima[cap] then
              allowed = false
              break
            end
          end
          if allowed then
            retryAt = x
            break
          end
        end
      end
    end
  end
  line[1] = string.format('%.0f', retryAt)
  return concat(line, ' ', 1, #windows + 1) .. '\n'
end

-- Appends the "+windows" line of a user just decided (`code`) from the sends gathered for the decision; a
-- capped user's retry time can lie past every window around `at`, so its record is read onward for it.
local function reportWindows(profile, block, class, record, n, times, onChannel, code, recorded)
  local capped = code >= REPLY_FIRST_CAP
  if capped and record then n, times, onChannel = liveSends(profile, block, class, record, true) end
  windowLines[#windowLines + 1] = windowsLine(profile, n, times, onChannel, recorded, capped)
end

local function isRecorded(code) return not peek and (code == 0 or code == REPLY_EXEMPT) end

-- The TTL the identity table needs at least: its identities and page markers outlive what uses them.
local identityTableTtl -- per call

-- The outcome for a user of profile `profileNumber` with record value `value` (false: none) and no block:
-- { reply code, the record after the call or false }. Worked out once per (profile, value) per call: a
-- sparse campaign's users mostly hold the same record bytes (the same sends of the same campaigns), so a
-- call decides each distinct history once, as the block path does per class.
local NO_RECORD = false
local recordOutcomes -- per call
local function recordOutcome(profileNumber, profile, value)
  local byValue = recordOutcomes[profileNumber]
  if byValue == nil then
    byValue = {}
    recordOutcomes[profileNumber] = byValue
  end
  local outcome = byValue[value]
  if outcome == nil then
    local record = value and readRecord(value) or nil
    local n, times, onChannel, isMine, duplicate = liveSends(profile, nil, 0, record)
    local code = duplicate and REPLY_DUPLICATE or decide(profile, n, times, onChannel, isMine)
    outcome = { code, isRecorded(code) and recordWith(record, profile, at, myIdentityNumber(true)) or false }
    byValue[value] = outcome
  end
  return outcome
end

-- Users of a page written through user records (read beforehand into `records`, by user ID); the page's
-- block, if any, is only read.
local function runRecordPage(spec, blockKey, hashIndex, pageBase, records, page, marked)
  -- only a page marked in the identity table can have a block: an unmarked one costs no read
  local block = marked and readBlock(blockKey) or nil
  if type(block) == 'table' and block.err then return block end
  if marked and block == nil and not peek then redis.call('HDEL', identityTableKey, 'p:' .. page) end
  local classOfUser = block and classesOfUsers(block.userClasses)
  for index = 1, (#spec - 5) / 2 do
    local offset, profileNumber = byte(spec, 4 + 2 * index, 5 + 2 * index)
    local profile = profiles[profileNumber]
    if profile == nil then return redis.error_reply('ERR cap-sends: unknown profile ' .. profileNumber) end
    local userId = pageBase + offset
    local value = records[userId]
    local code, written
    if block or withWindows then
      local record = value and readRecord(value) or nil
      local class = classOfUser and classOfUser[offset] or 0
      local n, times, onChannel, isMine, duplicate = liveSends(profile, block, class, record)
      code = duplicate and REPLY_DUPLICATE or decide(profile, n, times, onChannel, isMine)
      written = isRecorded(code) and recordWith(record, profile, at, myIdentityNumber(true))
      if withWindows then
        reportWindows(profile, block, class, record, n, times, onChannel, code, written and true or false)
      end
    else
      local outcome = recordOutcome(profileNumber, profile, value or NO_RECORD)
      code, written = outcome[1], outcome[2]
    end
    reply[#reply + 1] = code
    if written then storeRecord(hashIndex, userId, written, profile.retention) end
  end
end

-- Users of a page written through its block (created when missing); their user records are absorbed.
-- Per user only table lookups: decisions per (profile, class) and the class after an append are worked out
-- once per call, because users of a page mostly share a history.
local markedPagesToWrite -- per call
local function runBlockPage(spec, blockKey, hashIndex, pageBase, pageNumber)
  local block = readBlock(blockKey)
  if type(block) == 'table' and block.err then return block end
  local existed = block ~= nil
  block = block or emptyBlock()
  local records = readPageRecords(hashIndex, pageBase, spec)
  local times = block.times

  -- per event: whether it is on the call's channel and the call's own send, worked out once per page
  local eventOwn, eventMine, anyMine, oldest
  local function learnEvents()
    eventOwn, eventMine, anyMine, oldest = {}, {}, false, math.huge
    local identities, eventIdentities = block.identities, block.eventIdentities
    local ownIdentity, mineIdentity = {}, {}
    for i = 1, #identities do
      ownIdentity[i] = isOnCallChannel(identities[i])
      mineIdentity[i] = identities[i] == identity
      if mineIdentity[i] then anyMine = true end
    end
    for e = 1, #times do
      local i = eventIdentities[e]
      eventOwn[e], eventMine[e] = ownIdentity[i], mineIdentity[i]
      if times[e] < oldest then oldest = times[e] end
    end
  end
  local function addEvent(t, eventIdentity)
    local identityIndex
    for i = 1, #block.identities do
      if block.identities[i] == eventIdentity then identityIndex = i break end
    end
    if identityIndex == nil then
      block.identities[#block.identities + 1] = eventIdentity
      identityIndex = #block.identities
    end
    times[#times + 1] = t
    block.eventIdentities[#block.eventIdentities + 1] = identityIndex
    if eventOwn then
      -- anyMine stays as the block had it: an event added now is only in classes made by this call, which
      -- are never decided in it (each user is decided once, on the class it had), so the duplicate check
      -- that anyMine turns on (a decode of every class decided) has nothing more to find
      eventOwn[#times], eventMine[#times] = isOnCallChannel(eventIdentity), eventIdentity == identity
      if t < oldest then oldest = t end
    end
    return #times
  end
  -- the call's send as a block event, added on first use
  local newEvent
  local function callEvent()
    if newEvent == nil then newEvent = addEvent(at, identity) end
    return newEvent
  end

  -- decoded classes, once per class per call
  local decoded = {}
  local function eventsOf(class)
    local numbers = decoded[class]
    if numbers == nil then
      numbers = class > 0 and eventsOfClass(block.classes[class], block.width) or {}
      decoded[class] = numbers
    end
    return numbers
  end
  -- A profile whose users on this page have many different classes (histories that diverged) counts, per
  -- cap, the sends of a class that some window of that cap containing `at` could hold with one
  -- string.gsub over the class's bytes against the set of those events (1-byte event numbers): no table per
  -- user. Only a class whose count reaches the cap's max is decoded and decided send by send. A profile
  -- deciding few classes on the page (the dense case, or 64 segments × 32 caps) does not build the sets.
  local SETS_AFTER = 8
  local classesDecided, nearSets = {}, {}
  local function nearSetOf(profileNumber, profile, cap)
    local byCap = nearSets[profileNumber]
    if byCap == nil then
      byCap = {}
      nearSets[profileNumber] = byCap
    end
    local set = byCap[cap]
    if set == nil then
      local window = profile.windows[cap]
      local from, to, every = at - window, at + window, profile.everyChannel[cap]
      if profile.cutoff > from then from = profile.cutoff end
      local members = {}
      for e = 1, #times do
        local t = times[e]
        if t > from and t < to and (every or eventOwn[e]) then members[#members + 1] = e end
      end
      set = false
      if #members == #times then
        -- every event of the page: a class's count is its length
        set = true
      elseif #members > 0 then
        set = '[' .. patternSet(members) .. ']'
      end
      byCap[cap] = set
    end
    return set
  end
  local function decideClass(profileNumber, profile, class)
    if eventOwn == nil then learnEvents() end
    local decided = (classesDecided[profileNumber] or 0) + 1
    classesDecided[profileNumber] = decided
    if decided >= SETS_AFTER and class > 0 and block.width == 1 and not exemptCounted
      and not (anyMine and not anonymous) then
      local history = block.classes[class]
      local n = #history
      if n < profile.least then return 0 end
      local windows, maxima, undecided = profile.windows, profile.maxima, false
      for cap = 1, #windows do
        local max = maxima[cap]
        if max == 0 then return REPLY_FIRST_CAP + cap - 1 end
        if n >= max then
          local set = nearSetOf(profileNumber, profile, cap)
          if set then
            local count = n
            if set ~= true then count = select(2, string.gsub(history, set, '')) end
            if count >= max then
              undecided = true
              break
            end
          end
        end
      end
      if not undecided then return 0 end
    end
    local numbers = eventsOf(class)
    return decideSends(profile, #numbers, numbers, times, eventOwn, eventMine, anyMine)
  end

  -- the class of a history made in this call: a new class, shared by the users that reach the same history.
  -- Every such history holds an event added by this call, so it never equals a class the block already had:
  -- only this call's classes are indexed (not the block's hundreds, when histories diverged)
  local newClasses = {}
  local function classOfHistory(history)
    local class = newClasses[history]
    if class == nil then
      block.classes[#block.classes + 1] = history
      class = #block.classes
      newClasses[history] = class
    end
    return class
  end
  -- the call's event in the block's width, once encoded
  local callEventBytes
  -- absorbed records can add many events at once: widen before a number outgrows the width
  local function fitWidth()
    if #times <= WIDTH_LIMIT[block.width] then return end
    local wider = #times > WIDTH_LIMIT[2] and 3 or 2
    for i, history in ipairs(block.classes) do
      block.classes[i] = encodeClass(eventsOfClass(history, block.width), wider)
    end
    block.width = wider
    block.compactAt = math.min(block.compactAt, WIDTH_LIMIT[wider])
    newClasses, callEventBytes = {}, nil
  end
  -- the class of `class`'s history for `profile` with `extra` event numbers appended (sends at or before the
  -- profile's cutoff dropped); the bytes are appended as they are when no event of the page is that old
  -- (`extra` nil: the call's send only)
  local function successorOf(profile, class, extra)
    if eventOwn == nil then learnEvents() end
    local tail
    if extra then
      fitWidth()
      tail = encodeClass(extra, block.width)
    else
      if callEventBytes == nil then
        local e = callEvent()
        fitWidth()
        callEventBytes = encodeNumber(e, block.width)
      end
      tail = callEventBytes
    end
    if class == 0 then return classOfHistory(tail) end
    if oldest <= profile.cutoff then
      local live = {}
      local numbers = eventsOf(class)
      for i = 1, #numbers do
        if times[numbers[i]] > profile.cutoff then live[#live + 1] = numbers[i] end
      end
      return classOfHistory(encodeClass(live, block.width) .. tail)
    end
    return classOfHistory(block.classes[class] .. tail)
  end

  -- per (profile, class), for users without a record: the reply code when nothing is recorded, else minus one
  -- minus the class after the append (a recorded send's code is the same for the whole call)
  local recordedCode = exemptCounted and REPLY_EXEMPT or 0
  local absorbed, written, longestRetention = {}, false, 0

  -- The block's value with the users' class bytes (a string, or a table of bytes), written once per page;
  -- `uniform`: the 2 bytes of every user's class when they share one (stored alone).
  local function writeBlock(userClasses, uniform)
    if #times >= block.compactAt or #block.classes >= block.classLimit then
      local bytes = type(userClasses) == 'table' and userClasses or { byte(userClasses, 1, 2 * PAGE_USERS) }
      compact(block, bytes)
      userClasses, uniform = bytes, nil
    end
    if type(userClasses) == 'table' then userClasses = char(unpackList(userClasses)) end
    local ttl = ttlFor(longestRetention)
    if existed then ttl = math.max(ttl, redis.call('PTTL', blockKey)) end
    -- the marker that tells record-path calls to read this block lives at least as long as the block
    if not existed then markedPagesToWrite[#markedPagesToWrite + 1] = pageNumber end
    identityTableTtl = math.max(identityTableTtl, ttl)
    redis.call('SET', blockKey, cmsgpack.pack(FORMAT, block.width, block.compactAt, block.classLimit,
      block.identities, block.times, block.eventIdentities, block.classes, uniform or userClasses), 'PX', ttl)
    for _, userId in ipairs(absorbed) do storeRecord(hashIndex, userId, false, 0) end
  end

  -- A page whose users all share one history (every page of a dense campaign, until segments' caps tell
  -- them apart) is decided once per segment present, with no Lua per user: the reply and the new class
  -- bytes are string.rep() of one code and one class when every segment present decides alike, else the
  -- call's (offset, profile) bytes with each pair replaced by its profile's code and class (string.gsub).
  -- New class bytes are written this way only when the call holds the whole page (its users ascend, so the
  -- pairs are offsets 0..255 in order). A user with a record, a call reporting windows, or a part of a page
  -- with something to write takes the per-user loop below.
  -- (every user has the first user's class when the bytes are the first user's repeated: strings are
  -- interned, so once the call made that string, the comparison is one pointer's; the last user is looked at
  -- first, so a page whose histories diverged rarely makes it)
  local userClasses, classBytes = block.userClasses, sub(block.userClasses, 1, 2)
  if not withWindows and sub(userClasses, -2) == classBytes and userClasses == repeated(classBytes, PAGE_USERS)
    and not anyRecord(records) then
    local class = byte(classBytes, 1) * 256 + byte(classBytes, 2)
    local userCount = (#spec - 5) / 2
    local codeOf, outcomeOf, firstCode, alike, anyRecorded = {}, {}, nil, true, false
    for profileNumber = 0, profileCount - 1 do
      if isProfileOf(spec, profileNumber) then
        local key = char(profileNumber)
        local outcome = decideClass(profileNumber, profiles[profileNumber], class)
        local code = outcome
        if not peek and (outcome == 0 or outcome == REPLY_EXEMPT) then
          anyRecorded = true
          code = recordedCode
        end
        outcomeOf[key], codeOf[key] = outcome, char(code)
        if firstCode == nil then firstCode = code elseif code ~= firstCode then alike = false end
      end
    end
    local wholePage = userCount == PAGE_USERS
    if firstCode == nil then return redis.error_reply('ERR cap-sends: unknown profile in ' .. blockKey) end
    if not anyRecorded or wholePage then
      local codes
      if alike then
        codes = repeated(char(firstCode), userCount)
      else
        codes = string.gsub(sub(spec, 6), '.(.)', codeOf)
        if #codes ~= userCount then return redis.error_reply('ERR cap-sends: unknown profile in ' .. blockKey) end
      end
      appendReply(codes)
      if not anyRecorded then return end
      local successorBytes, firstSuccessor, sameSuccessor = {}, nil, true
      for key, outcome in pairs(outcomeOf) do
        local bytes = classBytes
        if outcome == 0 or outcome == REPLY_EXEMPT then
          local profile = profiles[byte(key)]
          local nextClass = successorOf(profile, class, nil)
          bytes = char(floor(nextClass / 256), nextClass % 256)
          if profile.retention > longestRetention then longestRetention = profile.retention end
        end
        successorBytes[key] = bytes
        if firstSuccessor == nil then firstSuccessor = bytes elseif bytes ~= firstSuccessor then sameSuccessor = false end
      end
      if sameSuccessor then return writeBlock(repeated(firstSuccessor, PAGE_USERS), firstSuccessor) end
      return writeBlock((string.gsub(sub(spec, 6), '.(.)', successorBytes)))
    end
  end

  -- the page's class numbers, 2 bytes per user (offset o: users[2o + 1] * 256 + users[2o + 2])
  local users = { byte(block.userClasses, 1, 2 * PAGE_USERS) }
  local specBytes = { byte(spec, 6, #spec) }
  local outcomes = {}
  local r = #reply
  for u = 1, #specBytes, 2 do
    local profileNumber = specBytes[u + 1]
    local o = specBytes[u] * 2 + 1
    local class = users[o] * 256 + users[o + 1]
    local byClass = outcomes[profileNumber]
    if byClass == nil then
      if profiles[profileNumber] == nil then
        return redis.error_reply('ERR cap-sends: unknown profile ' .. profileNumber)
      end
      byClass = {}
      outcomes[profileNumber] = byClass
    end
    r = r + 1
    local value = records and records[(u + 1) / 2]
    if value or withWindows then
      -- a user with a record (or a call reporting windows): decided over the block's class and the record
      local profile = profiles[profileNumber]
      local record = value and readRecord(value) or nil
      local n, liveTimes, onChannel, isMine, duplicate = liveSends(profile, block, class, record)
      local code = duplicate and REPLY_DUPLICATE or decide(profile, n, liveTimes, onChannel, isMine)
      reply[r] = code
      local recorded = not peek and (code == 0 or code == REPLY_EXEMPT)
      if recorded then
        local extra = {}
        if record then
          for _, send in ipairs(allSends(record)) do
            local sendIdentity = identityOfNumber(send[2])
            if send[1] > profile.cutoff and sendIdentity then extra[#extra + 1] = addEvent(send[1], sendIdentity) end
          end
          absorbed[#absorbed + 1] = pageBase + specBytes[u]
        end
        extra[#extra + 1] = callEvent()
        local nextClass = successorOf(profile, class, extra)
        users[o], users[o + 1] = floor(nextClass / 256), nextClass % 256
        written = true
        if profile.retention > longestRetention then longestRetention = profile.retention end
      end
      if withWindows then
        reportWindows(profile, block, class, record, n, liveTimes, onChannel, code, recorded)
      end
    else
      local outcome = byClass[class]
      if outcome == nil then
        local profile = profiles[profileNumber]
        outcome = decideClass(profileNumber, profile, class)
        if not peek and (outcome == 0 or outcome == REPLY_EXEMPT) then
          outcome = -1 - successorOf(profile, class, nil)
          written = true
          if profile.retention > longestRetention then longestRetention = profile.retention end
        end
        byClass[class] = outcome
      end
      if outcome < 0 then
        reply[r] = recordedCode
        local nextClass = -1 - outcome
        local low = nextClass % 256
        users[o], users[o + 1] = (nextClass - low) / 256, low
      else
        reply[r] = outcome
      end
    end
  end

  if written then return writeBlock(users) end
end

-- Sets every per-call local from the call's keys and arguments (the header above states them): the tables the
-- functions fill start empty, the flags false. Returns an error reply, or nothing.
local function beginCall(keys, args)
  byte, sub, char, floor, concat, unpackList, format = string.byte, string.sub, string.char, math.floor,
    table.concat, unpack, string.format
  now = tonumber(args[1])
  at = tonumber(args[2])
  peek = sub(args[3], 1, 4) == 'peek'
  withWindows = sub(args[3], -8) == '+windows'
  identity = args[4]
  channel = string.match(identity, '^[^:]*')
  anonymous = #identity == #channel + 1
  exemptCounted = args[5] == '1'
  horizon = tonumber(args[6])
  identityTableKey = keys[1]
  keyPrefix = args[9]
  rangeNames, ranges = {}, {}
  for range in string.gmatch(args[10], '%d+') do
    rangeNames[#rangeNames + 1] = range
    ranges[#rangeNames] = { root = keyPrefix .. 'u:' .. range, hashKey = keyPrefix .. 'r:' .. range, parts = {},
      retention = 0, hashWrites = {}, hashDeletes = {} }
  end
  blobSplitBytes = tonumber(args[11])
  -- the call's tag, which every page argument must belong to: its block key is built from the prefix, so a
  -- page of another tag would be read and written under the wrong tag, unnoticed (functions/core/shared/keys.ts:
  -- a page of 256 IDs is in group page / 4, and a group's tag is group mod 256)
  callTag = tonumber(string.match(keyPrefix, '{(%d+)}:$') or nil)
  if identityTableKey ~= keyPrefix .. 'ids' or callTag == nil then
    return redis.error_reply('ERR cap-sends: key prefix ' .. keyPrefix .. ' does not name the tag of ' .. identityTableKey)
  end
  onCallChannel, identityByNumber, myNumber, myNumberWritten, repeatedOf = {}, {}, nil, false, {}
  reply, replyParts, windowLines = {}, {}, {}
  scratchTimes, scratchOnChannel, scratchIsMine = {}, {}, {}
  records, blobOfUser, inHash, identityTableTtl, recordOutcomes = {}, {}, {}, 0, {}
  markedPagesToWrite = {}
  return readProfiles(args[7], args[8])
end

-- One call (FCALL): the pages of ARGV[12..], then the writes gathered, then the reply.
local function capSends(keys, args)
  local failure = beginCall(keys, args)
  if failure then return failure end
  local pageCount = #args - FIRST_PAGE_ARG

  -- the user records of every page (one GET per blob), and in one HMGET of the identity table this call's
  -- identity number and which of the record-path pages have a block
  local markedPages = {}
  -- each page argument's header, parsed once: its record hash, its path, its page number, "p:<page>"
  local pageHashes, pagePaths, pageNumbers, pageMarkers = {}, {}, {}, {}
  do
    local idsByRange, markerFields, markerPages = {}, { 'i:' .. identity }, {}
    for page = 1, pageCount do
      local spec = args[FIRST_PAGE_ARG + page]
      local hashIndex, path, a, b, c = byte(spec, 1, 5)
      local pageNumber = (a * 256 + b) * 256 + c
      if floor(pageNumber / 4) % 256 ~= callTag or ranges[hashIndex] == nil then
        return redis.error_reply(format('ERR cap-sends: page %d (record hash %d) is not of the tag of %s', pageNumber,
          hashIndex, identityTableKey))
      end
      local marker = format('p:%d', pageNumber)
      pageHashes[page], pagePaths[page], pageNumbers[page], pageMarkers[page] = hashIndex, path, pageNumber, marker
      local ids = idsByRange[hashIndex]
      if ids == nil then
        ids = { blockPages = {} }
        idsByRange[hashIndex] = ids
      end
      local pageBase = pageNumber * PAGE_USERS
      if path == 0 then
        for u = 6, #spec, 2 do ids[#ids + 1] = pageBase + byte(spec, u) end
      else
        -- a block-path page's users are looked up only in a range that holds records (not per user otherwise)
        ids.blockPages[#ids.blockPages + 1] = spec
      end
      if path == 0 then
        markerFields[#markerFields + 1] = marker
        markerPages[#markerPages + 1] = pageNumber
      end
    end
    -- a call of block-path pages only reads its identity number when a user record needs it
    if #markerPages > 0 then
      local found = redis.call('HMGET', identityTableKey, unpackList(markerFields))
      myNumber = tonumber(found[1] or nil) or false
      for i = 1, #markerPages do markedPages[markerPages[i]] = found[i + 1] and true or false end
    end
    -- Every undeclared key the call may read, touched once before anything is written: while the slot
    -- migrates, Redis refuses a script's access to a key that is not (or no longer) here, and a call that
    -- read a moved record as empty would decide wrong. Refused here, nothing is written and the call is
    -- answered TRYAGAIN, which the caller retries until the migration ends (declared keys get the same).
    -- (the blobs and hashes of every range too: an EXISTS of several keys is what the importing node refuses
    -- while one of them is missing; a single key missing there would read as empty)
    local touched = {}
    for _, range in ipairs(ranges) do
      touched[#touched + 1] = range.root
      touched[#touched + 1] = range.hashKey
    end
    for page = 1, pageCount do
      if pagePaths[page] == 1 or markedPages[pageNumbers[page]] then
        touched[#touched + 1] = keyPrefix .. pageMarkers[page]
      end
    end
    if #touched > 0 then
      local probe = redis.pcall('EXISTS', unpackList(touched))
      if type(probe) == 'table' and probe.err then
        return redis.error_reply('TRYAGAIN cap-sends: a key of ' .. keyPrefix .. ' is not on this node: ' .. probe.err)
      end
    end
    for hashIndex, ids in pairs(idsByRange) do
      local refused = readRange(hashIndex, ids)
      if refused then
        return redis.error_reply('TRYAGAIN cap-sends: a key of ' .. keyPrefix .. ' is not on this node: ' .. refused.err)
      end
    end
  end

  for page = 1, pageCount do
    local spec, hashIndex, pageNumber = args[FIRST_PAGE_ARG + page], pageHashes[page], pageNumbers[page]
    local pageBase = pageNumber * PAGE_USERS
    local failure
    if pagePaths[page] == 1 then
      failure = runBlockPage(spec, keyPrefix .. pageMarkers[page], hashIndex, pageBase, pageNumber)
    else
      -- the block's name only for a page that has one (a sparse call's pages mostly have none)
      local marked = markedPages[pageNumber]
      failure = runRecordPage(spec, marked and keyPrefix .. pageMarkers[page], hashIndex, pageBase, records, pageNumber,
        marked)
    end
    if failure then return failure end
  end

  local identityRetention = 0
  for _, range in ipairs(ranges) do
    writeRange(range, ttlFor(range.retention))
    identityRetention = math.max(identityRetention, range.retention)
  end
  if identityRetention > 0 then identityTableTtl = math.max(identityTableTtl, ttlFor(identityRetention)) end
  local markers = {}
  for _, pageNumber in ipairs(markedPagesToWrite) do
    markers[#markers + 1] = 'p:' .. pageNumber
    markers[#markers + 1] = 1
  end
  if myNumberWritten and myNumber then
    markers[#markers + 1] = 't:' .. myNumber
    markers[#markers + 1] = now
  end
  if #markers > 0 then redis.call('HSET', identityTableKey, unpackList(markers)) end
  if identityTableTtl > 0 then extendTableTtl(identityTableKey, identityTableTtl) end

  -- one byte per user
  flushReply()
  return concat(replyParts) .. concat(windowLines)
end

return capSends
