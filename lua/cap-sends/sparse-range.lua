-- Whether every user of `ids` (4 ID bytes each, big endian) is of the call's tag: bits 10..17 of its ID, the
-- low 2 bits of byte 2 and the high 6 of byte 3 (functions/core/shared/keys.ts). One string.gsub in C: byte 3
-- matched by a pattern set of its 4 values, byte 2 looked up in a table of its 64 (by the tag's high 2 bits: 4
-- tables for every tag), a user of the tag replaced by nothing, any other byte kept.
-- (a pattern set of byte 2's 64 values is scanned twice a user: ~1.8k instructions; a Lua loop over the
-- bytes ~1k)
local SET_SPECIAL_ITEMS = { [37] = '%%', [93] = '%]', [94] = '%^', [45] = '%-', [0] = '%z' }
local tagPatternOf, tagByteTwoOf = {}, {}
local function allOfCallTag(ids)
  local pattern = tagPatternOf[call.callTag]
  if pattern == nil then
    local highs = {}
    for c = 4 * (call.callTag % 64), 4 * (call.callTag % 64) + 3 do highs[#highs + 1] = SET_SPECIAL_ITEMS[c] or char(c) end
    pattern = '.(.)[' .. concat(highs) .. '].'
    tagPatternOf[call.callTag] = pattern
  end
  local high = floor(call.callTag / 64)
  local byteTwo = tagByteTwoOf[high]
  if byteTwo == nil then
    byteTwo = {}
    for b = high, 255, 4 do byteTwo[char(b)] = '' end
    tagByteTwoOf[high] = byteTwo
  end
  return string.gsub(ids, pattern, byteTwo) == ''
end
-- The codes of users[1..m] of `blob` at positions at..at + m - 1 (at 0: none in the blob, which is empty),
-- profile bytes `profileBytes`, and the blob's value after them (nil: unchanged); false when the general path
-- must decide (a busy user's record, an unknown profile).
local function sparseRange(range, blob, packed, profileBytes, at, m)
  local value, n = blob.value, blob.n
  local profileNumber = byte(profileBytes, 1)
  local uniform = profileBytes == repeated(char(profileNumber), m)
  local oldClasses = at > 0 and sub(value, blob.classNumbers + 3 * at - 3, blob.classNumbers + 3 * (at + m - 1) - 1)
  -- (a blob of one class, as a campaign to a whole new range leaves it, has one record: no comparison)
  if uniform and (at == 0 or blob.classes == 1 or oldClasses == repeated(sub(oldClasses, 1, 3), m)) then
    -- one profile and one record: one outcome
    local profile = call.profiles[profileNumber]
    if profile == nil then return false end
    local record = NO_RECORD
    if at > 0 then
      local a, b, c = byte(oldClasses, 1, 3)
      record = blobClassValue(blob, (a * 256 + b) * 256 + c)
    end
    local outcome = recordOutcome(profileNumber, profile, record)
    local written = outcome[2]
    if written and #written > BIG_RECORD_BYTES then return false end
    local codes = repeated(char(outcome[1]), m)
    if not written then return codes end
    if outcome[3] > range.retention then range.retention = outcome[3] end
    if at == 0 or m == n then
      -- every user of the blob holds the one record: a blob of one class
      return codes, char(BLOB_RECORDS) .. fixedNumber(m, 3) .. '\0\0\1\0\0\1' .. packed .. repeated('\0\0\1', m) ..
        fixedNumber(#written, 4) .. written, m, 1
    end
    local classes = blob.classes + 1
    local dataSize = readFixed(value, blob.ends + 4 * (blob.classes - 1), 4)
    return codes, char(BLOB_RECORDS) .. fixedNumber(n, 3) .. fixedNumber(classes, 3) .. fixedNumber(blob.live, 3) ..
      sub(value, BLOB_HEADER + 1, blob.classNumbers + 3 * at - 4) ..
      repeated(fixedNumber(classes, 3), m) .. sub(value, blob.classNumbers + 3 * (at + m - 1), blob.data - 1) ..
      fixedNumber(dataSize + #written, 4) .. sub(value, blob.data) .. written, n, classes
  end
  -- users of several profiles or records: an outcome per distinct pair, a loop over the users' bytes
  local profileOf, classBytes = bytesOf(profileBytes), at > 0 and bytesOf(oldClasses)
  local codes, parts, idParts, count = {}, {}, {}, at > 0 and n or 0
  -- (a new blob drops an empty one's classes)
  local classes, dataSize = 0, 0
  if at > 0 then classes, dataSize = blob.classes, readFixed(value, blob.ends + 4 * (blob.classes - 1), 4) end
  local classOf, newEnds, newValues = {}, {}, {}
  for i = 1, m do
    local p = profileOf[i]
    local profile = call.profiles[p]
    if profile == nil then return false end
    local record = NO_RECORD
    if at > 0 then
      local q = 3 * i
      record = blobClassValue(blob, (classBytes[q - 2] * 256 + classBytes[q - 1]) * 256 + classBytes[q])
    end
    local outcome = recordOutcome(p, profile, record)
    local written = outcome[2]
    codes[i] = outcome[1]
    if written then
      if #written > BIG_RECORD_BYTES then return false end
      if outcome[3] > range.retention then range.retention = outcome[3] end
      local bytes = classOf[written]
      if bytes == nil then
        classes, dataSize = classes + 1, dataSize + #written
        bytes = fixedNumber(classes, 3)
        classOf[written], newEnds[#newEnds + 1], newValues[#newValues + 1] = bytes, fixedNumber(dataSize, 4), written
      end
      parts[#parts + 1] = bytes
      if at == 0 then
        idParts[#idParts + 1] = sub(packed, 4 * i - 3, 4 * i)
        count = count + 1
      end
    elseif at > 0 then
      parts[#parts + 1] = sub(oldClasses, 3 * i - 2, 3 * i)
    end
  end
  codes = charsOf(codes)
  if #newValues == 0 then return codes end
  if at == 0 then
    return codes, char(BLOB_RECORDS) .. fixedNumber(count, 3) .. fixedNumber(classes, 3) .. fixedNumber(classes, 3) ..
      concat(idParts) .. concat(parts) .. concat(newEnds) .. concat(newValues), count, classes
  end
  return codes, char(BLOB_RECORDS) .. fixedNumber(n, 3) .. fixedNumber(classes, 3) .. fixedNumber(blob.live, 3) ..
    sub(value, BLOB_HEADER + 1, blob.classNumbers + 3 * at - 4) ..
    concat(parts) .. sub(value, blob.classNumbers + 3 * (at + m - 1), blob.data - 1) .. concat(newEnds) ..
    sub(value, blob.data) .. concat(newValues), n, classes
end
