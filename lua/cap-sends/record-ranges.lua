-- Per range of the call (a page argument's byte 1): its blob or directory and parts, its old-layout hash.
-- The record of each user of the call (nil: none) and, in a range split into parts, the part it is in or
-- goes to; users whose record is a field of the old-layout hash.
local records -- per call

-- The lowest ID of the part that holds `id` (bounds: the directory's, ascending from 0).
local function partOf(bounds, id)
  local low, high = 1, #bounds
  while low < high do
    local middle = floor((low + high + 1) / 2)
    if bounds[middle] <= id then low = middle else high = middle - 1 end
  end
  return bounds[low]
end

-- One range's part of readRangeRoots() (below): `value` its blob or directory (false: none), `hashExists`
-- whether its old-layout hash exists.
local function readRangeRoot(range, value, hashExists)
  range.hashExists = hashExists
  range.hasRecords = value and true or range.hashExists
  range.rootValue = value
  -- the users whose record may be a field of the hash (not in the blob, the hash exists)
  range.missing = {}
  -- the users of its record-path pages not looked up while parsed (their 4 ID bytes in `packed`), and its
  -- block-path pages
  range.ids = { packed = {}, blockPages = {} }
  if not (value and byte(value, 1) == BLOB_DIRECTORY) then
    range.single = readBlobValue(range.root, 0, value)
    range.parts[0] = range.single
  end
end
-- Reads every range's blob or directory (one MGET) and whether its old-layout hash exists (one EXISTS of them
-- all: mostly none does; else one per range), before the page arguments are parsed: a range of one blob
-- (range.single) then looks its record-path users up as they are parsed (lookUpUser()), the others wait for
-- readRange(). Refused keys (a slot migrating) return the error; nothing is written before every read is done.
local function readRangeRoots()
  if #call.ranges == 0 then return end
  if #call.ranges == 1 then
    -- (a single-user check's call: no tables of keys and values)
    local range = call.ranges[1]
    local value = redis.pcall('GET', range.root)
    if type(value) == 'table' then return value end
    local exists = redis.pcall('EXISTS', range.hashKey)
    if type(exists) == 'table' then return exists end
    readRangeRoot(range, value, exists == 1)
    return
  end
  local roots, hashKeys = {}, {}
  for r, range in ipairs(call.ranges) do roots[r], hashKeys[r] = range.root, range.hashKey end
  local values = redis.pcall('MGET', unpackList(roots))
  if values.err then return values end
  local hashes = redis.pcall('EXISTS', unpackList(hashKeys))
  if type(hashes) == 'table' then return hashes end
  for r, range in ipairs(call.ranges) do
    local exists = hashes
    if hashes > 0 then
      exists = redis.pcall('EXISTS', range.hashKey)
      if type(exists) == 'table' then return exists end
    end
    readRangeRoot(range, values[r], exists == 1)
  end
end

-- The record of user `id` (`packed`: its 4 ID bytes) of `range` from `blob` into records[id] (nil: none; a
-- sparse campaign's users mostly have none, and a table entry costs what a lookup does).
-- (blobRecord() inline for an empty blob and a user found at the first try: an ID of a sparse blob seldom
-- appears misaligned)
local function lookUpUser(range, blob, id, packed)
  local record
  if blob.n == 0 then
    blob.positions[id], blob.packedOf[id] = -1, packed
  else
    local value, first = blob.value, BLOB_HEADER + 1
    local found = find(value, packed, first, true)
    if found and found < blob.classNumbers and (found - first) % 4 == 0 then
      local position = (found - first) / 4 + 1
      blob.positions[id] = position
      local a, b, c = byte(value, blob.classNumbers + 3 * position - 3, blob.classNumbers + 3 * position - 1)
      local class = (a * 256 + b) * 256 + c
      record = blob.classValues[class] or blobClassValue(blob, class)
    else
      record = blobRecord(blob, id, packed)
    end
  end
  if record then
    records[id] = record
  elseif range.hashExists then
    range.missing[#range.missing + 1] = id
  end
end

-- Reads the parts of a directory range that `ids` (its record-path users not yet looked up, with their 4 ID
-- bytes in ids.packed) and the users of its block-path pages (only where the range holds records) fall in,
-- looks those users up, and reads the records of the range's users that may be fields of its hash.
local function readRange(hashIndex, ids)
  local range = call.ranges[hashIndex]
  local root, value = range.root, range.rootValue
  local packs = ids.packed
  if range.hasRecords then
    for _, spec in ipairs(ids.blockPages) do
      local a, b, c = byte(spec, 3, 5)
      local pageBase = ((a * 256 + b) * 256 + c) * PAGE_USERS
      for u = 6, #spec, 2 do
        local offset = byte(spec, u)
        ids[#ids + 1], packs[#ids + 1] = pageBase + offset, char(a, b, c, offset)
      end
    end
  end
  if not range.single and #ids > 0 then
    local bounds, partKeys = {}, { root }
    for q = 2, #value, 4 do bounds[#bounds + 1] = readFixed(value, q, 4) end
    range.bounds, range.directoryValue = bounds, value
    for i = 1, #ids do
      local lowest = partOf(bounds, ids[i])
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
  end
  local single, bounds, parts = range.single, range.bounds, range.parts
  for i = 1, #ids do
    local id, blob = ids[i], single
    if not single then
      -- blobOfUser names the part only where there are parts
      blob = parts[partOf(bounds, id)]
      call.blobOfUser[id] = blob
    end
    lookUpUser(range, blob, id, packs[i])
  end
  local missing = range.missing
  if #missing > 0 then
    local names = {}
    for i = 1, #missing do names[i] = format('%d', missing[i]) end
    local values = redis.call('HMGET', range.hashKey, unpackList(names))
    for i = 1, #missing do
      if values[i] then records[missing[i]], call.inHash[missing[i]] = values[i], true end
    end
  end
end

-- The user's record after the call (false: the user leaves, its sends absorbed by a page block), kept for
-- the writes at the end; `retention`: how long the record must live.
local function storeRecord(hashIndex, id, record, retention)
  local range = call.ranges[hashIndex]
  if retention > range.retention then range.retention = retention end
  local blob = range.bounds and call.blobOfUser[id] or range.parts[0]
  local inBlob = blob.positions[id] > 0
  -- a chunked record's chunk fields, written and deleted beside it in the range's hash
  local edits = call.chunkEdits[id]
  if edits then
    for _, field in ipairs(edits.writes) do range.hashWrites[#range.hashWrites + 1] = field end
    for _, field in ipairs(edits.deletes) do range.hashDeletes[#range.hashDeletes + 1] = field end
    call.chunkEdits[id] = nil
  end
  if record and (#record > BIG_RECORD_BYTES or byte(record, 1) >= CHUNKED_HEADER or (call.withWindows and not inBlob)) then
    range.hashWrites[#range.hashWrites + 1] = format('%d', id)
    range.hashWrites[#range.hashWrites + 1] = record
    if inBlob then record = false else return end
  elseif call.inHash[id] then
    range.hashDeletes[#range.hashDeletes + 1] = format('%d', id)
  end
  if record or inBlob then
    -- edits come in ID order per blob (pages ascend, a page's users too); blobAfterEdits() sorts them otherwise
    if id <= blob.lastEdit then blob.unsorted = true end
    blob.lastEdit = id
    blob.editIds[#blob.editIds + 1], blob.editRecords[#blob.editRecords + 1] = id, record
    blob.edited = true
  end
end

-- A blob's new value written, rebuilt when dead classes piled up, split when past the size; returns the
-- lowest ID of a part split off (nil when none) and its value.
local function writeBlob(blob, ttl)
  local value, count, classes
  if blob.newValue then
    value, count, classes = unpackList(blob.newValue)
  else
    value, count, classes = blobAfterEdits(blob)
  end
  local upper, upperValue
  if #value > call.blobSplitBytes and count >= 2 then
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
  if not call.ranges[hashIndex].hasRecords then return nil end
  local found, any = {}, false
  -- a held user's record is left as it is (runBlockPage() decides the others): in step with the others only
  for u = 6, #spec, 2 do
    if byte(spec, u + 1) ~= HELD_PROFILE then
      local record = records[pageBase + byte(spec, u)] or false
      found[#found + 1] = record
      if record then any = true end
    end
  end
  return any and found or nil
end
