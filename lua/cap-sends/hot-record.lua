-- A hot user's record (format 3): its newest sends in the record itself, older ones in chunks of SPILL_SENDS
-- sends that are written once and read only when a window around `at` reaches them, so a check rewrites at
-- most HEAD_SENDS sends and a directory, not every send the user keeps.
--   byte 1      CHUNKED_HEADER + window number width - 1
--   bytes 2-5   the user ID (its chunks are named by it, so no two users' records are the same bytes)
--   bytes 6-8   the next chunk's sequence number
--   varint K, then K × 17 bytes: per chunk its oldest and newest time (6 bytes each), send count (2), sequence (3)
--   varint I, then I × 10 bytes: each identity number in the chunks (4 bytes) and its newest send there (6)
--   byte T: the tail's number width (0: none), then a varint length and the tail of the format-2 record it was
--             made from (parseTail()), only ever shortened: its expired sends dropped as the user is written
--   the window part: the sends not spilled, ascending, a 6-byte time and a width-byte number each
-- Chunk q of user U is field "<U>:<q>" of U's range hash: a byte of number width, then sends as a window part.
-- A record of format 2 becomes one when it reaches HEAD_SENDS sends, by slices of its bytes (nothing decoded);
-- a call spills at most SPILLS_PER_CALL chunks, so a big record drains into chunks over its next writes.
-- (its helpers are locals of this block: the chunk's top level keeps its locals for the rest)
do
  local SPILL_SENDS, CHUNK_ENTRY, SPILLS_PER_CALL = 512, 17, 2

  local function chunkField(userId, seq) return format('%d:%d', userId, seq) end
  local function rangeHashOf(userId) return format('%sr:%d', call.keyPrefix, floor(userId / 536870912)) end
  -- the chunk fields a call writes and deletes for a user, moved into its range's writes by storeRecord()
  local function chunkEditsOf(userId)
    local edits = call.chunkEdits[userId]
    if edits == nil then
      edits = { writes = {}, deletes = {} }
      call.chunkEdits[userId] = edits
    end
    return edits
  end

  local function readChunked(value)
    local width, userId, nextSeq = byte(value, 1) - CHUNKED_HEADER + 1, readFixed(value, 2, 4), readFixed(value, 6, 3)
    local count, position = readVarint(value, 9)
    local chunks, directoryAt = {}, position
    for i = 1, count do
      chunks[i] = { min = readTime(value, position), max = readTime(value, position + 6),
        count = readFixed(value, position + 12, 2), seq = readFixed(value, position + 14, 3) }
      position = position + CHUNK_ENTRY
    end
    local directory = sub(value, directoryAt, position - 1)
    local idCount
    idCount, position = readVarint(value, position)
    local spilled = {}
    for _ = 1, idCount do
      spilled[readFixed(value, position, 4)] = readTime(value, position + 4)
      position = position + 10
    end
    local tail, tailWidth = nil, byte(value, position)
    position = position + 1
    if tailWidth > 0 then
      local length
      length, position = readVarint(value, position)
      tail = parseTail(sub(value, position, position + length - 1), 1, tailWidth)
      position = position + length
    end
    local stride = 6 + width
    return { value = value, width = width, stride = stride, start = position, count = (#value - position + 1) / stride,
      tail = tail,
      chunked = { userId = userId, nextSeq = nextSeq, chunks = chunks, directory = directory, spilled = spilled } }
  end

  -- The sends of `sources` (records read in place, each ascending) as one record: their bytes joined when they
  -- follow each other in time at one width, or decoded and sorted (a backfill landed among older sends).
  local function joinedSends(sources)
    table.sort(sources, function(a, b) return a.first < b.first end)
    local width, ordered = sources[1].width, true
    for i = 2, #sources do
      if sources[i].width ~= width or sources[i].first < sources[i - 1].last then ordered = false end
      if sources[i].width > width then width = sources[i].width end
    end
    local value, count
    if ordered then
      local parts, total = {}, 0
      for i, source in ipairs(sources) do
        parts[i] = sub(source.value, source.start, source.start + source.count * source.stride - 1)
        total = total + source.count
      end
      value, count = concat(parts), total
    else
      local sends = {}
      for _, source in ipairs(sources) do
        for i = 1, source.count do sends[#sends + 1] = { sendTime(source, i), sendNumber(source, i) } end
      end
      table.sort(sends, function(a, b) return a[1] < b[1] end)
      value, count = windowBytes(sends, width), #sends
    end
    return { value = value, width = width, stride = 6 + width, start = 1, count = count }
  end

  -- A chunk's value read in place as a record.
  local function chunkRecord(value)
    local width = byte(value, 1)
    local stride = 6 + width
    local record = { value = value, width = width, stride = stride, start = 2, count = (#value - 1) / stride }
    record.first, record.last = sendTime(record, 1), sendTime(record, record.count)
    return record
  end

  -- The sends of a chunked record that windows in (reach, before) can hold, as one record read in place: the
  -- window part and the chunks whose times overlap that span (one HMGET); the record itself when none does.
  -- With `every`, all chunks (a block absorbing the user): their fields are then deleted with the record.
  local function chunkedSends(head, reach, before, every)
    local info = head.chunked
    local fields = {}
    for _, chunk in ipairs(info.chunks) do
      if every or (chunk.max > reach and chunk.min < before) then fields[#fields + 1] = chunkField(info.userId, chunk.seq) end
    end
    if #fields == 0 then return head end
    if every then
      local deletes = chunkEditsOf(info.userId).deletes
      for _, field in ipairs(fields) do deletes[#deletes + 1] = field end
    end
    local sources = {}
    if head.count > 0 then
      sources[1] = { value = head.value, width = head.width, stride = head.stride, start = head.start, count = head.count,
        first = sendTime(head, 1), last = sendTime(head, head.count) }
    end
    -- a chunk missing from the hash (the store lost it) holds nothing
    for _, value in ipairs(redis.call('HMGET', rangeHashOf(info.userId), unpackList(fields))) do
      if value then sources[#sources + 1] = chunkRecord(value) end
    end
    if #sources == 0 then return head end
    local joined = joinedSends(sources)
    joined.tail = head.tail
    return joined
  end

  -- The sends of a chunked record that windows in (reach, before) can hold, as a record read in place across
  -- its window part and the chunks whose times overlap that span, joined nowhere: a search reads a chunk (one
  -- HGET, once a call) only when it reaches into it, and finds the chunk by the directory's times and counts.
  -- The record itself when no chunk overlaps; false when the parts are not in time order (a backfill landed
  -- among older sends: chunkedSends() joins and sorts them then). Fields: spanned, count, tail, timeAt(i),
  -- firstAfter(t).
  local function spannedSends(head, reach, before)
    local info, parts = head.chunked, {}
    for _, chunk in ipairs(info.chunks) do
      if chunk.max > reach and chunk.min < before then
        parts[#parts + 1] = { min = chunk.min, max = chunk.max, count = chunk.count,
          field = chunkField(info.userId, chunk.seq) }
      end
    end
    if #parts == 0 then return head end
    table.sort(parts, function(a, b) return a.min < b.min end)
    if head.count > 0 then
      parts[#parts + 1] = { min = sendTime(head, 1), max = sendTime(head, head.count), count = head.count,
        value = head.value, start = head.start, stride = head.stride }
    end
    local total = 0
    for k, part in ipairs(parts) do
      if k > 1 and parts[k - 1].max > part.min then return false end
      part.first, total = total + 1, total + part.count
    end
    call.chunkValues = call.chunkValues or {}
    local hash = rangeHashOf(info.userId)
    local function loaded(part)
      if not part.value then
        local value = call.chunkValues[part.field]
        if value == nil then
          value = redis.call('HGET', hash, part.field)
          call.chunkValues[part.field] = value
        end
        -- the directory and its chunks are written in one command: a directory naming a missing chunk is a
        -- record no search can read in place
        if not value then error('cap-sends: chunk ' .. part.field .. ' of a hot user record is missing') end
        part.value, part.start, part.stride = value, 2, 6 + byte(value, 1)
      end
      return part
    end
    -- the part holding send i: a binary search over the parts' first indices
    local function partOf(i)
      local low, high = 1, #parts
      while low < high do
        local middle = floor((low + high + 1) / 2)
        if parts[middle].first <= i then low = middle else high = middle - 1 end
      end
      return parts[low]
    end
    local spanned = { spanned = true, count = total, tail = head.tail }
    spanned.timeAt = function(i)
      local part = loaded(partOf(i))
      return readTime(part.value, part.start + (i - part.first) * part.stride)
    end
    -- the first send later than t (count + 1 when none is): the part by its newest time (the newest part
    -- looked at first: most windows around `at` end in it), then inside it
    spanned.firstAfter = function(t)
      local low, high = 1, #parts + 1
      if parts[#parts].min <= t then low = #parts end
      while low < high do
        local middle = floor((low + high) / 2)
        if parts[middle].max > t then high = middle else low = middle + 1 end
      end
      local part = parts[low]
      if part == nil then return total + 1 end
      if part.min > t then return part.first end
      loaded(part)
      local first, last = 1, part.count
      while first < last do
        local middle = floor((first + last) / 2)
        if readTime(part.value, part.start + (middle - 1) * part.stride) > t then last = middle else first = middle + 1 end
      end
      return part.first + first - 1
    end
    return spanned
  end

  -- The record value of a chunked record whose window part is `window` (`count` sends of `width`-byte numbers):
  -- the oldest SPILL_SENDS at a time go to new chunks while it holds more than HEAD_SENDS.
  local function encodeChunked(info, chunks, directory, spilled, width, window, count, tail)
    local stride, nextSeq = 6 + width, info.nextSeq
    local writes = chunkEditsOf(info.userId).writes
    local spills = 0
    while count > HEAD_SENDS and spills < SPILLS_PER_CALL do
      spills = spills + 1
      -- the window part is ascending: a chunk's oldest and newest are its ends
      local bytes = sub(window, 1, SPILL_SENDS * stride)
      local entry = { min = readTime(bytes, 1), max = readTime(bytes, #bytes - stride + 1), count = SPILL_SENDS,
        seq = nextSeq }
      -- each identity's newest send in the chunk: the first met from its end (a time read once per identity)
      local met = {}
      for position = #bytes - stride + 1, 1, -stride do
        local number = readFixed(bytes, position + 6, width)
        if not met[number] then
          met[number] = true
          local t = readTime(bytes, position)
          if (spilled[number] or -1) < t then spilled[number] = t end
        end
      end
      writes[#writes + 1] = chunkField(info.userId, nextSeq)
      writes[#writes + 1] = char(width) .. bytes
      chunks[#chunks + 1] = entry
      directory = directory .. timeBytes(entry.min) .. timeBytes(entry.max) .. fixedNumber(entry.count, 2) ..
        fixedNumber(entry.seq, 3)
      nextSeq = nextSeq + 1
      window, count = sub(window, SPILL_SENDS * stride + 1), count - SPILL_SENDS
    end
    local ids, idCount = {}, 0
    for number, newest in pairs(spilled) do
      idCount = idCount + 1
      ids[idCount] = fixedNumber(number, 4) .. timeBytes(newest)
    end
    -- pairs() has no order: sorted, the same sends give the same bytes
    table.sort(ids)
    local tailPart = char(0)
    if tail then
      local bytes = varint(tail.count) .. timeBytes(tail.first) .. timeBytes(tail.last) .. timeBytes(tail.newest) ..
        tail.ids .. tail.deltas
      tailPart = char(tail.width) .. varint(#bytes) .. bytes
    end
    return char(CHUNKED_HEADER + width - 1) .. fixedNumber(info.userId, 4) .. fixedNumber(nextSeq, 3) .. varint(#chunks) ..
      directory .. varint(idCount) .. concat(ids) .. tailPart .. window
  end

  -- The chunked record after a send (t, number) is counted for a user of `profile`: chunks whose every send is at
  -- or before the profile's cutoff are deleted, so are such sends of the window part, and the send is inserted
  -- in time order. The work is the window part's and the directory's bytes, whatever the chunks hold.
  local function chunkedWith(head, profile, t, number)
    local info, cutoff = head.chunked, profile.cutoff
    local chunks, directory, deletes = {}, info.directory, nil
    for _, chunk in ipairs(info.chunks) do
      if chunk.max > cutoff then
        chunks[#chunks + 1] = chunk
      else
        deletes = deletes or chunkEditsOf(info.userId).deletes
        deletes[#deletes + 1] = chunkField(info.userId, chunk.seq)
      end
    end
    if deletes then
      local entries = {}
      for i, chunk in ipairs(chunks) do
        entries[i] = timeBytes(chunk.min) .. timeBytes(chunk.max) .. fixedNumber(chunk.count, 2) .. fixedNumber(chunk.seq, 3)
      end
      directory = concat(entries)
    end
    local spilled = {}
    for spilledNumber, newest in pairs(info.spilled) do
      if newest > cutoff then spilled[spilledNumber] = newest end
    end
    local width, from = math.max(head.width, widthOf(number)), firstAfter(head, cutoff)
    local kept
    local keptCount = head.count - from + 1
    if width > head.width then
      local sends = {}
      for i = from, head.count do sends[#sends + 1] = { sendTime(head, i), sendNumber(head, i) } end
      kept = windowBytes(sends, width)
    else
      kept = sub(head.value, head.start + (from - 1) * head.stride, head.start + head.count * head.stride - 1)
    end
    -- the send in time order (mostly the newest: the last kept send is looked at first)
    local stride = 6 + width
    local low, high = 0, keptCount
    if keptCount > 0 and readTime(kept, (keptCount - 1) * stride + 1) <= t then low = keptCount end
    while low < high do
      local middle = floor((low + high + 1) / 2)
      if readTime(kept, (middle - 1) * stride + 1) <= t then low = middle else high = middle - 1 end
    end
    local window = sub(kept, 1, low * stride) .. timeBytes(t) .. fixedNumber(number, width) .. sub(kept, low * stride + 1)
    local tail = head.tail and tailAfter(head.tail, cutoff, {})
    return encodeChunked(info, chunks, directory, spilled, width, window, keptCount + 1, tail)
  end

  -- The record after a send, for a hot user: a chunked record written on, or a big record of an earlier format
  -- made one: its window part and tail taken as they are (slices, nothing decoded), its oldest sends spilled.
  local function recordWithChunks(record, profile, t, number, userId)
    if not record.chunked then
      record = { value = record.value, width = record.width, stride = record.stride, start = record.start,
        count = record.count, tail = record.tail,
        chunked = { userId = userId, nextSeq = 1, chunks = {}, directory = '', spilled = {} } }
    end
    return chunkedWith(record, profile, t, number)
  end

  hot.read, hot.sends, hot.spanned, hot.recordWith = readChunked, chunkedSends, spannedSends, recordWithChunks
end
