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

local function readBlobValue(key, low, value)
  local blob = { key = key, low = low, existed = value ~= false, value = value or '', n = 0, classes = 0,
    live = 0, positions = {}, packedOf = {}, editIds = {}, editRecords = {}, lastEdit = -1, unsorted = false,
    edited = false, classValues = {}, placedId = -1, placedAt = 1 }
  if value then
    -- the header's 9 bytes in one string.byte
    local n1, n2, n3, c1, c2, c3, l1, l2, l3 = byte(value, 2, 10)
    blob.n, blob.classes, blob.live = (n1 * 256 + n2) * 256 + n3, (c1 * 256 + c2) * 256 + c3, (l1 * 256 + l2) * 256 + l3
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
-- The record of user `id` (`packed`: its 4 ID bytes) in the blob (nil when it has none); where it is, or would
-- go, kept for the write in blob.positions[id]: its position when found, minus the position it would take when
-- not (and then its ID bytes in blob.packedOf[id]). The ID is looked for with string.find over the ID section
-- (in C; a hit must be aligned on an ID), and only an ID that is not there is placed by a binary search.
local function blobRecord(blob, id, packed)
  local value, n = blob.value, blob.n
  if n == 0 then
    blob.positions[id], blob.packedOf[id] = -1, packed
    return nil
  end
  local first, stop = BLOB_HEADER + 1, BLOB_HEADER + 4 * n
  local from = first
  while true do
    local found = find(value, packed, from, true)
    if found == nil or found > stop then break end
    if (found - first) % 4 == 0 then
      local position = (found - first) / 4 + 1
      blob.positions[id] = position
      local a, b, c = byte(value, blob.classNumbers + 3 * position - 3, blob.classNumbers + 3 * position - 1)
      local class = (a * 256 + b) * 256 + c
      return blob.classValues[class] or blobClassValue(blob, class)
    end
    from = found + 1
  end
  -- a call's users come in ascending order (its pages ascend), so an absent user's place is at or after the
  -- last one placed: from there, IDs 1, 2, 4, ... further bound the binary search (a campaign reaching many
  -- of a blob's users looks at a few IDs each, not log n)
  local low, high = 1, n
  if id > blob.placedId then
    low = blob.placedAt
    local step = 1
    while low + step - 1 < n do
      local probe = low + step - 1
      local a, b, c, d = byte(value, BLOB_HEADER + 4 * probe - 3, BLOB_HEADER + 4 * probe)
      if ((a * 256 + b) * 256 + c) * 256 + d >= id then
        high = probe
        break
      end
      low, step = probe + 1, step * 2
    end
  end
  while low <= high do
    local middle = floor((low + high) / 2)
    local a, b, c, d = byte(value, BLOB_HEADER + 4 * middle - 3, BLOB_HEADER + 4 * middle)
    if ((a * 256 + b) * 256 + c) * 256 + d < id then low = middle + 1 else high = middle - 1 end
  end
  blob.positions[id], blob.packedOf[id], blob.placedId, blob.placedAt = -low, packed, id, low
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
-- The blob's value after the call's edits (blob.editIds ascending, each one's new record in blob.editRecords,
-- or false: the user leaves): slices of the old value between the edited users, the new records appended as
-- classes (each distinct one once). A user that stays keeps its ID bytes: only its class number changes, so
-- the ID section of a call that adds and removes nobody is one slice.
local function blobAfterEdits(blob)
  local editIds, editRecords = blob.editIds, blob.editRecords
  if blob.unsorted then
    -- edits out of ID order (not the order calls make them): the last edit of each user, sorted
    local last, ids = {}, {}
    for k = 1, #editIds do
      if last[editIds[k]] == nil then ids[#ids + 1] = editIds[k] end
      last[editIds[k]] = editRecords[k]
    end
    table.sort(ids)
    editIds, editRecords = ids, {}
    for k = 1, #ids do editRecords[k] = last[ids[k]] end
  end
  local value, n, classes, positions = blob.value, blob.n, blob.classes, blob.positions
  local dataSize = classes > 0 and readFixed(value, blob.ends + 4 * (classes - 1), 4) or 0
  -- old user i's ID is at idBase + 4i (4 bytes), its class number at classBase + 3i (3 bytes)
  local idBase, classBase = BLOB_HEADER - 3, blob.classNumbers - 3
  local idParts, classParts, newEnds, newValues, classBytesOf = {}, {}, {}, {}, {}
  -- the first old user whose ID (class number) is not yet in idParts (classParts)
  local idsFrom, classesFrom, count = 1, 1, n
  for k = 1, #editIds do
    local id, record = editIds[k], editRecords[k]
    local position = positions[id]
    local found = position > 0
    if not found then position = -position end
    -- old users before `position` keep their class numbers; a user that comes or goes cuts the ID section too
    if position > classesFrom then
      classParts[#classParts + 1] = sub(value, classBase + 3 * classesFrom, classBase + 3 * position - 1)
    end
    classesFrom = found and position + 1 or position
    if not found or not record then
      if position > idsFrom then idParts[#idParts + 1] = sub(value, idBase + 4 * idsFrom, idBase + 4 * position - 1) end
      idsFrom = classesFrom
    end
    if record then
      local classBytes = classBytesOf[record]
      if classBytes == nil then
        classes, dataSize = classes + 1, dataSize + #record
        classBytes = fixedNumber(classes, 3)
        newEnds[#newEnds + 1], newValues[#newValues + 1], classBytesOf[record] = fixedNumber(dataSize, 4), record,
          classBytes
      end
      classParts[#classParts + 1] = classBytes
      if not found then
        idParts[#idParts + 1] = blob.packedOf[id]
        count = count + 1
      end
    elseif found then
      count = count - 1
    end
  end
  if n >= idsFrom then idParts[#idParts + 1] = sub(value, idBase + 4 * idsFrom, idBase + 4 * n + 3) end
  if n >= classesFrom then
    classParts[#classParts + 1] = sub(value, classBase + 3 * classesFrom, classBase + 3 * n + 2)
  end
  return char(BLOB_RECORDS) .. fixedNumber(count, 3) .. fixedNumber(classes, 3) .. fixedNumber(blob.live, 3) ..
    concat(idParts) .. concat(classParts) .. sub(value, blob.ends, blob.data - 1) .. concat(newEnds) ..
    sub(value, blob.data) .. concat(newValues), count, classes
end
