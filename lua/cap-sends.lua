--[=[ cap-sends.lua: exact multi-window frequency caps for many users in one call, over the users' own
recent sends only.

A user's sends live in one of two places, both under the call's hash tag (one slot):
  - a page block: one key per page of 256 consecutive user IDs that a campaign reached densely; users of a
    page mostly share their histories, so a block stores each send (event) and each history (class) once;
  - a user record: one field per user, in a hash shared by the sparse users of a wide ID range, with the
    user's own sends (6-byte time + identity number each). Single-user calls and sparse campaign users
    write here, so they never rewrite a page of 256 users.
A user's sends are the union of both. A page written through its block absorbs (and deletes) the user
records of the users it writes.

KEYS[1]          the tag's identity table (hash): "i:<identity>" -> number, "n:<number>" -> identity,
                 "next" -> last number given; user records name identities by number
KEYS[2..1+S]     the user-record hashes the call reads (field: decimal user ID)
KEYS[2+S..]      one page block per page argument, in the same order
ARGV[1]  now: the caller's clock (ms); retention and TTLs are measured from it, never from `at`
ARGV[2]  at: the send time (ms) being decided; may be ahead of now (skew) or behind it (backfill)
ARGV[3]  mode: "count" records allowed sends, "peek" writes nothing; "+log" appends each user's log
ARGV[4]  identity: "<channel>:<campaign ID>"; an empty campaign ID is anonymous (no idempotency)
ARGV[5]  "1": exempt but counted (no cap is checked), "0": capped
ARGV[6]  horizon ms: the longest retention of any profile of the policy; a block compaction drops sends
         at or before now - horizon
ARGV[7]  caps of the call's profiles, "|"-separated; a profile's caps ","-separated, each
         "windowMs:max:everyChannel" (everyChannel 1: counts every channel's sends, 0: this channel's)
ARGV[8]  retention ms of each profile, ","-separated: a user's own sends at or before now - retention are
         dropped whenever the user is written
ARGV[9]  S, the number of user-record hashes
ARGV[9+p] page p: byte 1 the index (1..S) of its user-record hash, byte 2 the path (1: block, 0: user
         records), bytes 3-5 the page number (user ID / 256, big endian), then per user 2 bytes: offset in
         the page (0..255) and profile number (0-based in ARGV[7]); no repeats
Reply    one byte per user in argument order: 0 allowed (counted), 1 duplicate, 2 exempt (counted without
         checks), 3+i capped by cap i (0-based) of its profile. With "+log", then each user's live sends
         after the call, in argument order, as lines "<time ms> <identity>\n".

Exactness: a send at `at` is allowed only if, for each cap (window W, max m), every window (x - W, x] that
contains `at` holds fewer than m counted sends, so sends stamped ahead of `at` count as well as sends
behind it.

Block value: cmsgpack of (format 4, width, compactAt, classLimit, identities, times, eventIdentities,
classes, userClasses): event e is (times[e], identities[eventIdentities[e]]); a class is a string of
`width`-byte event numbers; userClasses is 2 bytes per user (class number, 0 = no sends). Numbers stay
stable between compactions, which happen when the event count reaches compactAt (never beyond what
`width` can hold) or the class count reaches classLimit.
]=]

local byte, sub, char, floor, concat, unpackList = string.byte, string.sub, string.char, math.floor,
  table.concat, unpack

local now = tonumber(ARGV[1])
local at = tonumber(ARGV[2])
local peek = sub(ARGV[3], 1, 4) == 'peek'
local withLog = sub(ARGV[3], -4) == '+log'
local identity = ARGV[4]
local channel = string.match(identity, '^[^:]*')
local anonymous = #identity == #channel + 1
local exemptCounted = ARGV[5] == '1'
local horizon = tonumber(ARGV[6])
local recordHashCount = tonumber(ARGV[9])
local identityTableKey = KEYS[1]

local FORMAT, PAGE_USERS, MIN_COMPACT_AT, MIN_CLASS_LIMIT = 4, 256, 32, 256
local FUTURE_BOUND_MS = 300000
local NO_SENDS = string.rep('\0', 2 * PAGE_USERS)
local REPLY_DUPLICATE, REPLY_EXEMPT, REPLY_FIRST_CAP = 1, 2, 3
-- the largest event count each width can number, and the compaction threshold kept under it
local WIDTH_LIMIT = { 255, 65535, 16777215 }

-- Profiles present in this call: caps, retention cutoff and retention.
local profiles = {}
do
  local retentions = {}
  for retention in string.gmatch(ARGV[8], '%d+') do retentions[#retentions + 1] = tonumber(retention) end
  local index = 0
  for spec in string.gmatch(ARGV[7] .. '|', '([^|]*)|') do
    local windows, maxima, everyChannel = {}, {}, {}
    for window, max, scope in string.gmatch(spec, '(%d+):(%d+):(%d)') do
      windows[#windows + 1] = tonumber(window)
      maxima[#maxima + 1] = tonumber(max)
      everyChannel[#everyChannel + 1] = scope == '1'
    end
    local retention = retentions[index + 1]
    if retention == nil then return redis.error_reply('ERR cap-sends: no retention for profile ' .. index) end
    profiles[index] = {
      windows = windows, maxima = maxima, everyChannel = everyChannel,
      retention = retention, cutoff = now - retention,
    }
    index = index + 1
  end
end

-- whether an identity's send is on the call's channel, worked out once per identity per call
local onCallChannel = {}
local function isOnCallChannel(someIdentity)
  local known = onCallChannel[someIdentity]
  if known == nil then
    known = string.match(someIdentity, '^[^:]*') == channel
    onCallChannel[someIdentity] = known
  end
  return known
end

-- The reply code for a user of `profile` whose live sends are given (times, onChannel, isMine; n of them).
-- The window rule lives twice: here, and in functions/core/capping/frequency.ts (fullestWindowAround(), which
-- explains decisions in /v1/frequency replies); test/integration/window-predicate.test.ts checks they agree.
local function decide(profile, n, times, onChannel, isMine)
  if not anonymous then
    for e = 1, n do
      if isMine[e] then return REPLY_DUPLICATE end
    end
  end
  if exemptCounted then return REPLY_EXEMPT end
  local windows, maxima, everyChannel = profile.windows, profile.maxima, profile.everyChannel
  for cap = 1, #windows do
    local window, max = windows[cap], maxima[cap]
    if max == 0 then return REPLY_FIRST_CAP + cap - 1 end
    -- the counted sends that some window of this length containing `at` can hold
    local near, count = {}, 0
    local from, to = at - window, at + window
    for e = 1, n do
      local t = times[e]
      if t > from and t < to and (everyChannel[cap] or onChannel[e]) then
        count = count + 1
        near[count] = t
      end
    end
    if count >= max then
      table.sort(near)
      -- the windows (x - W, x] containing `at` have x in [at, at + W); the count only rises at x = at
      -- and at a send's time, so those are the right ends to try
      local rightEnd, first, last, nextSend = at, 1, 0, 1
      while true do
        while last < count and near[last + 1] <= rightEnd do last = last + 1 end
        while first <= count and near[first] <= rightEnd - window do first = first + 1 end
        if last - first + 1 >= max then return REPLY_FIRST_CAP + cap - 1 end
        while nextSend <= count and near[nextSend] <= rightEnd do nextSend = nextSend + 1 end
        if nextSend > count then break end
        rightEnd = near[nextSend]
      end
    end
  end
  return 0
end

-- Identity numbers of user records, read once per call.
local identityByNumber, myNumber = {}, nil
local function identityOfNumber(number)
  local known = identityByNumber[number]
  if known == nil then
    known = redis.call('HGET', identityTableKey, 'n:' .. number) or false
    identityByNumber[number] = known
  end
  return known
end
local function myIdentityNumber(create)
  if myNumber == nil then
    myNumber = tonumber(redis.call('HGET', identityTableKey, 'i:' .. identity) or nil) or false
  end
  if not myNumber and create then
    myNumber = redis.call('HINCRBY', identityTableKey, 'next', 1)
    redis.call('HSET', identityTableKey, 'i:' .. identity, myNumber, 'n:' .. myNumber, identity)
    identityByNumber[myNumber] = identity
  end
  return myNumber
end

-- A user record: its sends as { time, identity number, raw bytes } (6-byte time, varint number).
local function readRecord(value)
  local sends, position, length = {}, 1, #value
  while position <= length do
    local b1, b2, b3, b4, b5, b6 = byte(value, position, position + 5)
    local t = ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6
    local number, scale, cursor = 0, 1, position + 6
    while true do
      local b = byte(value, cursor)
      cursor = cursor + 1
      number = number + (b % 128) * scale
      if b < 128 then break end
      scale = scale * 128
    end
    sends[#sends + 1] = { t, number, sub(value, position, cursor - 1) }
    position = cursor
  end
  return sends
end
local function encodeSend(t, number)
  local bytes = {}
  for k = 6, 1, -1 do
    bytes[k] = t % 256
    t = (t - bytes[k]) / 256
  end
  local tail = {}
  repeat
    local low = number % 128
    number = (number - low) / 128
    tail[#tail + 1] = number > 0 and low + 128 or low
  until number == 0
  return char(unpackList(bytes)) .. char(unpackList(tail))
end

-- Fixed-width event numbers inside a class string.
local function encodeNumber(number, width)
  if width == 1 then return char(number) end
  if width == 2 then return char(floor(number / 256), number % 256) end
  return char(floor(number / 65536), floor(number / 256) % 256, number % 256)
end
local function eventsOfClass(history, width)
  local numbers = {}
  for q = 1, #history, width do
    local a, b, c = byte(history, q, q + width - 1)
    if width == 1 then numbers[#numbers + 1] = a
    elseif width == 2 then numbers[#numbers + 1] = a * 256 + b
    else numbers[#numbers + 1] = (a * 256 + b) * 256 + c end
  end
  return numbers
end

local function emptyBlock()
  return { width = 1, compactAt = MIN_COMPACT_AT, classLimit = MIN_CLASS_LIMIT, identities = {}, times = {},
    eventIdentities = {}, classes = {}, userClasses = NO_SENDS }
end
local function readBlock(key)
  local blob = redis.call('GET', key)
  if not blob then return nil end
  local format, width, compactAt, classLimit, identities, times, eventIdentities, classes, userClasses =
    cmsgpack.unpack(blob)
  if format ~= FORMAT then return redis.error_reply('ERR cap-sends: unknown block format in ' .. key) end
  return { width = width, compactAt = compactAt, classLimit = classLimit, identities = identities,
    times = times, eventIdentities = eventIdentities, classes = classes, userClasses = userClasses }
end

-- Keeps the events some user's class refers to and that are newer than now - horizon, renumbered by first
-- use, with the identities and classes they need; picks the narrowest width for the count.
local function compact(block, classOfUser)
  local eventMap, identityMap, classMap, classIndex = {}, {}, { [0] = 0 }, {}
  local identities, times, eventIdentities, classes = {}, {}, {}, {}
  local cutoff = now - horizon
  local kept = {}
  for offset = 0, PAGE_USERS - 1 do
    local class = classOfUser[offset]
    local renumbered = classMap[class]
    if renumbered == nil then
      local parts = {}
      for _, e in ipairs(class > 0 and eventsOfClass(block.classes[class], block.width) or {}) do
        local newEvent = eventMap[e]
        if newEvent == nil then
          newEvent = false
          local t = block.times[e]
          if t > cutoff then
            local oldIdentity = block.eventIdentities[e]
            local newIdentity = identityMap[oldIdentity]
            if newIdentity == nil then
              identities[#identities + 1] = block.identities[oldIdentity]
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
      classMap[class] = true
    end
  end
  local width = #times < 128 and 1 or (#times < 30000 and 2 or 3)
  classMap = { [0] = 0 }
  for offset = 0, PAGE_USERS - 1 do
    local class = classOfUser[offset]
    local renumbered = classMap[class]
    if renumbered == nil then
      renumbered = 0
      local parts = kept[class]
      if parts and #parts > 0 then
        local encoded = {}
        for i, e in ipairs(parts) do encoded[i] = encodeNumber(e, width) end
        local history = concat(encoded)
        renumbered = classIndex[history]
        if renumbered == nil then
          classes[#classes + 1] = history
          renumbered = #classes
          classIndex[history] = renumbered
        end
      end
      classMap[class] = renumbered
    end
    classOfUser[offset] = renumbered
  end
  block.identities, block.times, block.eventIdentities, block.classes = identities, times, eventIdentities, classes
  block.width = width
  block.compactAt = math.min(math.max(MIN_COMPACT_AT, 2 * #times), WIDTH_LIMIT[width])
  block.classLimit = math.max(MIN_CLASS_LIMIT, 2 * #classes)
end

local function classesOfUsers(userClasses)
  local bytes, classOfUser = { byte(userClasses, 1, 2 * PAGE_USERS) }, {}
  for offset = 0, PAGE_USERS - 1 do classOfUser[offset] = bytes[2 * offset + 1] * 256 + bytes[2 * offset + 2] end
  return classOfUser
end
local function userClassesString(classOfUser)
  local bytes = {}
  for offset = 0, PAGE_USERS - 1 do
    local class = classOfUser[offset]
    bytes[2 * offset + 1], bytes[2 * offset + 2] = floor(class / 256), class % 256
  end
  return char(unpackList(bytes))
end

-- The TTL a key needs for sends kept `retention` after now, the send at `at` included.
local function ttlFor(retention)
  return retention + math.min(FUTURE_BOUND_MS, math.max(0, at - now))
end
local function extendTtl(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end

local reply, logs = {}, {}
local recordHashExists = {}

-- The user records of `userIds` in hash `hashIndex`, or false each; no read when the hash does not exist.
local function readRecords(hashIndex, fields)
  local key = KEYS[1 + hashIndex]
  local exists = recordHashExists[hashIndex]
  if exists == nil then
    exists = redis.call('EXISTS', key) == 1
    recordHashExists[hashIndex] = exists
  end
  if not exists or #fields == 0 then return {} end
  return redis.call('HMGET', key, unpackList(fields))
end

-- A user's live sends as parallel arrays, from a block class (may be nil) and a record (may be nil).
local function liveSends(profile, block, class, record)
  local times, onChannel, isMine, labels, n = {}, {}, {}, {}, 0
  if block and class > 0 then
    for _, e in ipairs(eventsOfClass(block.classes[class], block.width)) do
      local t = block.times[e]
      if t > profile.cutoff then
        local eventIdentity = block.identities[block.eventIdentities[e]]
        n = n + 1
        times[n], onChannel[n], isMine[n], labels[n] = t, isOnCallChannel(eventIdentity),
          eventIdentity == identity, eventIdentity
      end
    end
  end
  if record then
    for _, send in ipairs(record) do
      if send[1] > profile.cutoff then
        local sendIdentity = identityOfNumber(send[2]) or ''
        n = n + 1
        times[n], onChannel[n], isMine[n], labels[n] = send[1], isOnCallChannel(sendIdentity),
          sendIdentity == identity, sendIdentity
      end
    end
  end
  return n, times, onChannel, isMine, labels
end

local function logLines(n, times, labels, appended)
  for e = 1, n do logs[#logs + 1] = string.format('%.0f %s\n', times[e], labels[e]) end
  if appended then logs[#logs + 1] = string.format('%.0f %s\n', at, identity) end
end

local function isRecorded(code) return not peek and (code == 0 or code == REPLY_EXEMPT) end

-- Writes to user records, gathered per hash and made once per call: { fields and values }, retention.
local recordWrites, recordRetention = {}, {}
-- The TTL the identity table needs at least: its identities and page markers outlive what uses them.
local identityTableTtl = 0

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
    local record = value and readRecord(value) or nil
    local n, times, onChannel, isMine, labels = liveSends(profile, block, classOfUser and classOfUser[offset] or 0,
      record)
    local code = decide(profile, n, times, onChannel, isMine)
    reply[#reply + 1] = code
    local recorded = isRecorded(code)
    if recorded then
      local kept = {}
      if record then
        for _, send in ipairs(record) do
          if send[1] > profile.cutoff then kept[#kept + 1] = send[3] end
        end
      end
      kept[#kept + 1] = encodeSend(at, myIdentityNumber(true))
      local writes = recordWrites[hashIndex]
      if writes == nil then
        writes = {}
        recordWrites[hashIndex] = writes
        recordRetention[hashIndex] = 0
      end
      writes[#writes + 1] = userId
      writes[#writes + 1] = concat(kept)
      recordRetention[hashIndex] = math.max(recordRetention[hashIndex], profile.retention)
    end
    if withLog then logLines(n, times, labels, recorded) end
  end
end

-- Users of a page written through its block (created when missing); their user records are absorbed.
local function runBlockPage(spec, blockKey, hashIndex, pageBase, pageNumber)
  local block = readBlock(blockKey)
  if type(block) == 'table' and block.err then return block end
  local existed = block ~= nil
  block = block or emptyBlock()
  local classOfUser = classesOfUsers(block.userClasses)
  local fields, offsets, userProfiles = {}, {}, {}
  for u = 6, #spec, 2 do
    offsets[#offsets + 1] = byte(spec, u)
    userProfiles[#userProfiles + 1] = byte(spec, u + 1)
    fields[#fields + 1] = pageBase + byte(spec, u)
  end
  local records = readRecords(hashIndex, fields)

  -- the call's send as a block event, added on first use
  local newEvent
  local function callEvent()
    if newEvent == nil then
      local myIndex
      for i = 1, #block.identities do
        if block.identities[i] == identity then myIndex = i break end
      end
      if myIndex == nil then
        block.identities[#block.identities + 1] = identity
        myIndex = #block.identities
      end
      block.times[#block.times + 1] = at
      block.eventIdentities[#block.eventIdentities + 1] = myIndex
      newEvent = #block.times
    end
    return newEvent
  end
  local classIndex
  local function classOf(numbers)
    if #numbers == 0 then return 0 end
    -- absorbed records can add many events at once: widen before a number outgrows the width
    if #block.times > WIDTH_LIMIT[block.width] then
      local wider = #block.times > WIDTH_LIMIT[2] and 3 or 2
      for i, history in ipairs(block.classes) do
        local encoded = {}
        for k, e in ipairs(eventsOfClass(history, block.width)) do encoded[k] = encodeNumber(e, wider) end
        block.classes[i] = concat(encoded)
      end
      block.width = wider
      block.compactAt = math.min(block.compactAt, WIDTH_LIMIT[wider])
      classIndex = nil
    end
    if classIndex == nil then
      classIndex = {}
      for i = 1, #block.classes do classIndex[block.classes[i]] = i end
    end
    local encoded = {}
    for i, e in ipairs(numbers) do encoded[i] = encodeNumber(e, block.width) end
    local history = concat(encoded)
    local class = classIndex[history]
    if class == nil then
      block.classes[#block.classes + 1] = history
      class = #block.classes
      classIndex[history] = class
    end
    return class
  end
  -- the live event numbers of a class for a profile
  local function liveEventsOf(profile, class)
    local live = {}
    if class > 0 then
      for _, e in ipairs(eventsOfClass(block.classes[class], block.width)) do
        if block.times[e] > profile.cutoff then live[#live + 1] = e end
      end
    end
    return live
  end

  -- per (profile, class): the decision and the class after the append, for users without a record
  local decided, successor = {}, {}
  local absorbed, written, longestRetention = {}, false, 0
  for index = 1, #offsets do
    local offset, profileNumber = offsets[index], userProfiles[index]
    local profile = profiles[profileNumber]
    if profile == nil then return redis.error_reply('ERR cap-sends: unknown profile ' .. profileNumber) end
    local class = classOfUser[offset]
    local record = records[index] and readRecord(records[index]) or nil
    local code, n, times, labels
    if record then
      local onChannel, isMine
      n, times, onChannel, isMine, labels = liveSends(profile, block, class, record)
      code = decide(profile, n, times, onChannel, isMine)
    else
      local byClass = decided[profileNumber]
      if byClass == nil then
        byClass = {}
        decided[profileNumber] = byClass
        successor[profileNumber] = {}
      end
      code = byClass[class]
      if code == nil or withLog then
        local onChannel, isMine
        n, times, onChannel, isMine, labels = liveSends(profile, block, class, nil)
        code = decide(profile, n, times, onChannel, isMine)
        byClass[class] = code
      end
    end
    reply[#reply + 1] = code
    local recorded = isRecorded(code)
    if recorded then
      local nextClass = not record and successor[profileNumber][class]
      if not nextClass then
        local live = liveEventsOf(profile, class)
        if record then
          for _, send in ipairs(record) do
            local sendIdentity = identityOfNumber(send[2])
            if send[1] > profile.cutoff and sendIdentity then
              local identityIndex
              for i = 1, #block.identities do
                if block.identities[i] == sendIdentity then identityIndex = i break end
              end
              if identityIndex == nil then
                block.identities[#block.identities + 1] = sendIdentity
                identityIndex = #block.identities
              end
              block.times[#block.times + 1] = send[1]
              block.eventIdentities[#block.eventIdentities + 1] = identityIndex
              live[#live + 1] = #block.times
            end
          end
          absorbed[#absorbed + 1] = fields[index]
        end
        live[#live + 1] = callEvent()
        nextClass = classOf(live)
        if not record then successor[profileNumber][class] = nextClass end
      end
      classOfUser[offset] = nextClass
      written = true
      if profile.retention > longestRetention then longestRetention = profile.retention end
    end
    if withLog then logLines(n, times, labels, recorded) end
  end

  if written then
    if #block.times >= block.compactAt or #block.classes >= block.classLimit then compact(block, classOfUser) end
    local ttl = ttlFor(longestRetention)
    if existed then ttl = math.max(ttl, redis.call('PTTL', blockKey)) end
    -- the marker that tells record-path calls to read this block lives at least as long as the block
    if not existed then redis.call('HSET', identityTableKey, 'p:' .. pageNumber, 1) end
    identityTableTtl = math.max(identityTableTtl, ttl)
    redis.call('SET', blockKey, cmsgpack.pack(FORMAT, block.width, block.compactAt, block.classLimit,
      block.identities, block.times, block.eventIdentities, block.classes, userClassesString(classOfUser)),
      'PX', ttl)
    if #absorbed > 0 then redis.call('HDEL', KEYS[1 + hashIndex], unpackList(absorbed)) end
  end
end

local pageCount = #KEYS - 1 - recordHashCount

-- the user records of every record-path page (one HMGET per hash), and in one HMGET of the identity table
-- this call's identity number and which of those pages have a block
local records, markedPages = {}, {}
do
  local fieldsByHash, markerFields, markerPages = {}, { 'i:' .. identity }, {}
  for page = 1, pageCount do
    local spec = ARGV[9 + page]
    if byte(spec, 2) == 0 then
      local hashIndex = byte(spec, 1)
      local a, b, c = byte(spec, 3, 5)
      local pageNumber = (a * 256 + b) * 256 + c
      local fields = fieldsByHash[hashIndex] or {}
      fieldsByHash[hashIndex] = fields
      for u = 6, #spec, 2 do fields[#fields + 1] = pageNumber * PAGE_USERS + byte(spec, u) end
      markerFields[#markerFields + 1] = 'p:' .. pageNumber
      markerPages[#markerPages + 1] = pageNumber
    end
  end
  local found = redis.call('HMGET', identityTableKey, unpackList(markerFields))
  myNumber = tonumber(found[1] or nil) or false
  for i, pageNumber in ipairs(markerPages) do markedPages[pageNumber] = found[i + 1] and true or false end
  for hashIndex, fields in pairs(fieldsByHash) do
    local values = redis.call('HMGET', KEYS[1 + hashIndex], unpackList(fields))
    for i, userId in ipairs(fields) do records[userId] = values[i] end
  end
end

for page = 1, pageCount do
  local spec = ARGV[9 + page]
  local hashIndex, path = byte(spec, 1, 2)
  local a, b, c = byte(spec, 3, 5)
  local pageNumber = (a * 256 + b) * 256 + c
  local pageBase = pageNumber * PAGE_USERS
  local blockKey = KEYS[1 + recordHashCount + page]
  local failure
  if path == 1 then
    failure = runBlockPage(spec, blockKey, hashIndex, pageBase, pageNumber)
  else
    failure = runRecordPage(spec, blockKey, hashIndex, pageBase, records, pageNumber, markedPages[pageNumber])
  end
  if failure then return failure end
end

local identityRetention = 0
for hashIndex, writes in pairs(recordWrites) do
  local key = KEYS[1 + hashIndex]
  redis.call('HSET', key, unpackList(writes))
  extendTtl(key, ttlFor(recordRetention[hashIndex]))
  identityRetention = math.max(identityRetention, recordRetention[hashIndex])
end
if identityRetention > 0 then identityTableTtl = math.max(identityTableTtl, ttlFor(identityRetention)) end
if identityTableTtl > 0 then extendTtl(identityTableKey, identityTableTtl) end

-- one byte per user; string.char takes the decisions in slices that stay within Lua's stack limit
local out = {}
for first = 1, #reply, 4000 do
  out[#out + 1] = char(unpackList(reply, first, math.min(first + 3999, #reply)))
end
return concat(out) .. concat(logs)
