-- A hot user's record (format 3): its newest sends in the record itself, older ones in chunks of SPILL_SENDS
-- sends that are written once and read only when a window around `at` reaches them, so a check rewrites at
-- most HEAD_SENDS sends and a directory, not every send the user keeps.
--   byte 1      CHUNKED_HEADER + window number width - 1
--   bytes 2-5   the user ID (its chunks are named by it, so no two users' records are the same bytes)
--   bytes 6-8   the next chunk's sequence number
--   varint K, then K × 17 bytes: per chunk its oldest and newest time (6 bytes each), 2 bytes: its send count
--             + 4096 × (its number width - 1) + 32768 while its identities are not yet listed below, sequence (3)
--   varint I, then I × 10 bytes: each identity number in the chunks (4 bytes) and its newest send there (6)
--   byte T: the tail's number width (0: none), then a varint length and the tail of the format-2 record it was
--             made from (parseTail()), only ever shortened: its expired sends dropped as the user is written
--   the window part: the sends not spilled, ascending, a 6-byte time and a width-byte number each
-- Chunk q of user U is field "<U>:<q>" of U's range hash: its sends as a window part (the directory gives the width).
-- A record of format 2 becomes one when it reaches HEAD_SENDS sends, by slices of its bytes (nothing decoded):
-- all but its newest sends go to chunks in that write, those past the first SPILLS_PER_CALL unlisted (their
-- identities not read); each later write lists at most SPILLS_PER_CALL of them, and until then a duplicate
-- is looked for in their bytes. A chunked record spills at most SPILLS_PER_CALL chunks a write.
-- (its helpers are locals of this block: the chunk's top level keeps its locals for the rest)
do
  local SPILL_SENDS, CHUNK_ENTRY, SPILLS_PER_CALL, UNLISTED, WIDTH_STEP = 512, 17, 2, 32768, 4096

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

  local function entryBytes(chunk)
    local counts = chunk.count + (chunk.width - 1) * WIDTH_STEP + (chunk.unlisted and UNLISTED or 0)
    return timeBytes(chunk.min) .. timeBytes(chunk.max) .. fixedNumber(counts, 2) .. fixedNumber(chunk.seq, 3)
  end
  -- Each identity's newest send in the chunk bytes `bytes` (ascending sends of `width`-byte numbers) into
  -- `spilled`: the first met from its end (a time read once per identity).
  local function listIdentities(bytes, width, spilled)
    local stride, met = 6 + width, {}
    for position = #bytes - stride + 1, 1, -stride do
      local number = readFixed(bytes, position + 6, width)
      if not met[number] then
        met[number] = true
        local t = readTime(bytes, position)
        if (spilled[number] or -1) < t then spilled[number] = t end
      end
    end
  end

  local function readChunked(value)
    local width, userId, nextSeq = byte(value, 1) - CHUNKED_HEADER + 1, readFixed(value, 2, 4), readFixed(value, 6, 3)
    local count, position = readVarint(value, 9)
    local chunks, directoryAt, unlisted = {}, position, 0
    for i = 1, count do
      local counts = readFixed(value, position + 12, 2)
      local listed = counts % UNLISTED
      chunks[i] = { min = readTime(value, position), max = readTime(value, position + 6), count = listed % WIDTH_STEP,
        width = floor(listed / WIDTH_STEP) + 1, unlisted = counts >= UNLISTED, seq = readFixed(value, position + 14, 3) }
      if counts >= UNLISTED then unlisted = unlisted + 1 end
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
      chunked = { userId = userId, nextSeq = nextSeq, chunks = chunks, directory = directory, spilled = spilled,
        unlisted = unlisted } }
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

  -- A chunk's value (its sends of `width`-byte numbers) read in place as a record.
  local function chunkRecord(value, width)
    local stride = 6 + width
    local record = { value = value, width = width, stride = stride, start = 1, count = #value / stride }
    record.first, record.last = sendTime(record, 1), sendTime(record, record.count)
    return record
  end

  -- The sends of a chunked record that windows in (reach, before) can hold, as one record read in place: the
  -- window part and the chunks whose times overlap that span (one HMGET); the record itself when none does.
  -- With `every`, all chunks (a block absorbing the user): their fields are then deleted with the record.
  local function chunkedSends(head, reach, before, every)
    local info = head.chunked
    local fields, picked = {}, {}
    for _, chunk in ipairs(info.chunks) do
      if every or (chunk.max > reach and chunk.min < before) then
        fields[#fields + 1], picked[#fields + 1] = chunkField(info.userId, chunk.seq), chunk
      end
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
    for i, value in ipairs(redis.call('HMGET', rangeHashOf(info.userId), unpackList(fields))) do
      if value then sources[#sources + 1] = chunkRecord(value, picked[i].width) end
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
        parts[#parts + 1] = { min = chunk.min, max = chunk.max, count = chunk.count, width = chunk.width,
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
        part.value, part.start, part.stride = value, 1, 6 + part.width
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

  -- The record value of a chunked record whose window part is `window` (sends of `width`-byte numbers), with the
  -- sends `pieces` (each SPILL_SENDS ascending sends, oldest first) written to new chunks, those past the first
  -- SPILLS_PER_CALL unlisted.
  local function encodeChunked(info, chunks, directory, spilled, width, pieces, window, tail)
    local stride, nextSeq = 6 + width, info.nextSeq
    if #pieces > 0 then
      local writes, entries = chunkEditsOf(info.userId).writes, { directory }
      for k, bytes in ipairs(pieces) do
        -- a piece is ascending: its oldest and newest are its ends
        local entry = { min = readTime(bytes, 1), max = readTime(bytes, #bytes - stride + 1), count = SPILL_SENDS,
          width = width, seq = nextSeq, unlisted = k > SPILLS_PER_CALL }
        if not entry.unlisted then listIdentities(bytes, width, spilled) end
        writes[#writes + 1] = chunkField(info.userId, nextSeq)
        writes[#writes + 1] = bytes
        chunks[#chunks + 1] = entry
        entries[#entries + 1] = entryBytes(entry)
        nextSeq = nextSeq + 1
      end
      directory = concat(entries)
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
  -- in time order (`t` nil: no send, the identities of unlisted chunks listed). The work is the window part's
  -- and the directory's bytes, whatever the chunks hold.
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
    -- an identity stays listed while a chunk kept may hold a send of it (a chunk keeps its sends past the
    -- cutoff until its newest is: a policy lengthening a window reaches them again)
    local spilled, oldest = {}, math.huge
    for _, chunk in ipairs(chunks) do oldest = math.min(oldest, chunk.min) end
    for spilledNumber, newest in pairs(info.spilled) do
      if newest >= oldest then spilled[spilledNumber] = newest end
    end
    -- at most SPILLS_PER_CALL unlisted chunks have their identities listed
    local listing = {}
    for _, chunk in ipairs(chunks) do
      if chunk.unlisted and #listing < SPILLS_PER_CALL then listing[#listing + 1] = chunk end
    end
    if #listing > 0 then
      local fields = {}
      for i, chunk in ipairs(listing) do fields[i] = chunkField(info.userId, chunk.seq) end
      for i, value in ipairs(redis.call('HMGET', rangeHashOf(info.userId), unpackList(fields))) do
        -- a chunk missing from the hash (the store lost it) holds nothing to list
        if value then listIdentities(value, listing[i].width, spilled) end
        listing[i].unlisted = false
      end
    end
    if deletes or #listing > 0 then
      local entries = {}
      for i, chunk in ipairs(chunks) do entries[i] = entryBytes(chunk) end
      directory = concat(entries)
    end
    local width, from = t and math.max(head.width, widthOf(number)) or head.width, firstAfter(head, cutoff)
    local keptCount, stride = head.count - from + 1, 6 + width
    -- the kept sends: value[base ..], keptCount sends of `width`-byte numbers
    local value, base = head.value, head.start + (from - 1) * head.stride
    if width > head.width then
      local sends = {}
      for i = from, head.count do sends[#sends + 1] = { sendTime(head, i), sendNumber(head, i) } end
      value, base = windowBytes(sends, width), 1
    end
    -- where the send goes in time order (mostly last: the last kept send is looked at first)
    local low, high = 0, t and keptCount or 0
    if t and keptCount > 0 and readTime(value, base + (keptCount - 1) * stride) <= t then low = keptCount end
    while low < high do
      local middle = floor((low + high + 1) / 2)
      if readTime(value, base + (middle - 1) * stride) <= t then low = middle else high = middle - 1 end
    end
    -- the oldest SPILL_SENDS at a time go to chunks while more than HEAD_SENDS stay: at most SPILLS_PER_CALL
    -- chunks, or every one when the record is made from an earlier format, each a slice of the kept bytes
    local spills = 0
    local sends = keptCount + (t and 1 or 0)
    while sends - spills * SPILL_SENDS > HEAD_SENDS and (spills < SPILLS_PER_CALL or info.converting) do
      spills = spills + 1
    end
    local send, total = t and timeBytes(t) .. fixedNumber(number, width), keptCount
    if send and low < spills * SPILL_SENDS then
      -- the send lands among those spilled (a backfill): the bytes with it in place are sliced
      value = sub(value, base, base + low * stride - 1) .. send .. sub(value, base + low * stride, base + keptCount * stride - 1)
      base, send, total = 1, nil, keptCount + 1
    end
    local pieces, piece = {}, SPILL_SENDS * stride
    for k = 1, spills do pieces[k] = sub(value, base + (k - 1) * piece, base + k * piece - 1) end
    local rest, window = base + spills * piece
    if send then
      window = sub(value, rest, base + low * stride - 1) .. send .. sub(value, base + low * stride, base + keptCount * stride - 1)
    else
      window = sub(value, rest, base + total * stride - 1)
    end
    local tail = head.tail and tailAfter(head.tail, cutoff, {})
    return encodeChunked(info, chunks, directory, spilled, width, pieces, window, tail)
  end

  -- The record after a send, for a hot user: a chunked record written on, or a big record of an earlier format
  -- made one: its window part and tail taken as they are (slices, nothing decoded), its oldest sends spilled.
  local function recordWithChunks(record, profile, t, number, userId)
    if not record.chunked then
      record = { value = record.value, width = record.width, stride = record.stride, start = record.start,
        count = record.count, tail = record.tail,
        chunked = { userId = userId, nextSeq = 1, chunks = {}, directory = '', spilled = {}, unlisted = 0,
          converting = true } }
    end
    return chunkedWith(record, profile, t, number)
  end

  -- Whether an unlisted chunk of a chunked record holds a send of identity `number` later than `cutoff`: its
  -- bytes searched (windowHas()), the chunks read once a call.
  local function unlistedHas(head, number, cutoff)
    local info = head.chunked
    if info.unlisted == 0 then return false end
    call.chunkValues = call.chunkValues or {}
    local fields = {}
    for _, chunk in ipairs(info.chunks) do
      local field = chunkField(info.userId, chunk.seq)
      if chunk.unlisted and chunk.max > cutoff and call.chunkValues[field] == nil then fields[#fields + 1] = field end
    end
    if #fields > 0 then
      for i, value in ipairs(redis.call('HMGET', rangeHashOf(info.userId), unpackList(fields))) do
        call.chunkValues[fields[i]] = value
      end
    end
    for _, chunk in ipairs(info.chunks) do
      local value = chunk.unlisted and chunk.max > cutoff and call.chunkValues[chunkField(info.userId, chunk.seq)]
      if value and windowHas(chunkRecord(value, chunk.width), number, cutoff) then return true end
    end
    return false
  end

  -- A chunked record with unlisted chunks written again by a call that counts nothing for its user (capped,
  -- or a duplicate): it lists SPILLS_PER_CALL of them, so a user who stays capped is not read through its
  -- unlisted chunks for good. nil when there is nothing to list (or the call is a peek: it writes nothing).
  local function listedRecord(record, profile)
    if call.peek or not (record and record.chunked and record.chunked.unlisted > 0) then return nil end
    return chunkedWith(record, profile, nil, nil)
  end

  hot.read, hot.sends, hot.spanned, hot.recordWith, hot.unlistedHas, hot.listed = readChunked, chunkedSends,
    spannedSends, recordWithChunks, unlistedHas, listedRecord
end
