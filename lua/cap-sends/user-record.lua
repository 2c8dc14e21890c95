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
-- A hot user's record (format 3, hot-record.lua: a header byte from CHUNKED_HEADER) is read and written by the
-- functions of `hot` (read, sends, recordWith); a record of another format reaching HEAD_SENDS sends becomes one
-- when written.
local CHUNKED_HEADER, HEAD_SENDS = 192, 1024
local hot = {}
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
  if header >= CHUNKED_HEADER then return hot.read(value) end
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
  if record.spanned then return record.firstAfter(t) end
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
  -- a chunked record's every chunk, deleted with it (a block absorbs the user)
  if record.chunked then record = hot.sends(record, 0, 0, true) end
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
-- is inserted in time order. A record of user `userId` holding HEAD_SENDS sends is written as a chunked one
-- when the call allows it ("+hot"); a chunked one stays chunked.
local function recordWith(record, profile, t, number, userId)
  local held = record and record.count + (record.tail and record.tail.count or 0)
  if record and (record.chunked or (call.hotRecords and held >= HEAD_SENDS)) then
    return hot.recordWith(record, profile, t, number, userId)
  end
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
