-- Whether page number `page` is the page of one of the users `ids` (4 ID bytes each, ascending; the page in
-- bytes 1-3): a binary search.
local function hasPage(ids, page)
  local low, high = 1, #ids / 4
  while low <= high do
    local half = floor((low + high) / 2)
    local a, b, c = byte(ids, 4 * half - 3, 4 * half - 1)
    local at = (a * 256 + b) * 256 + c
    if at == page then return true end
    if at < page then low = half + 1 else high = half - 1 end
  end
  return false
end
-- Whether the m IDs of `ids` (4 bytes each, big endian) ascend strictly and are all of the record range
-- named `rangeName` (an ID's range is its high 3 bits: functions/core/shared/keys.ts, recordRangeOf()): a range
-- argument's IDs as the blob keeps them. The blob's binary searches (hasPage(), a run's position) need them
-- sorted, a user twice would be two users, and one of another range would sit in the wrong blob.
-- (the IDs read as numbers by struct.unpack in C, a slice at a time: ~0.7k instructions a user, against ~1.5k
-- for their bytes by string.byte and the arithmetic in Lua)
local ID_SLICE = 2000
local idFormats = {}
local function isRangeSection(ids, m, rangeName)
  local last = -1
  for first = 1, m, ID_SLICE do
    local count = math.min(ID_SLICE, m - first + 1)
    local idFormat = idFormats[count]
    if idFormat == nil then
      idFormat = '>' .. string.rep('I4', count)
      idFormats[count] = idFormat
    end
    local numbers = { struct.unpack(idFormat, ids, 4 * first - 3) }
    for i = 1, count do
      local id = numbers[i]
      if id <= last then return false end
      last = id
    end
  end
  local range = tonumber(rangeName)
  return m == 0 or (floor(byte(ids, 1) / 32) == range and floor(byte(ids, 4 * m - 3) / 32) == range)
end
local function notRangeSection(r)
  return redis.error_reply(format('ERR cap-sends: argument %d: the users of range %d are not ascending, unique and ' ..
    'of range %s', FIRST_PAGE_ARG + r, r, call.rangeNames[r]))
end
-- A call's users as its ranges send them (ARGV[11 + r]: range r's users, packed; the header states it), as the
-- page arguments a call of the general path takes (the same users, pages and order): a Lua loop per user,
-- only for a call the sparse path leaves. An argument whose IDs are not a range's section (isRangeSection())
-- returns the error instead.
local function pageArgsOf(args, rangeCount)
  local pageArgs = {}
  for r = 1, rangeCount do
    local arg = args[FIRST_PAGE_ARG + r]
    local m = (#arg - 2) / 5
    local ids = sub(arg, 3, 2 + 4 * m)
    if not isRangeSection(ids, m, call.rangeNames[r]) then return nil, notRangeSection(r) end
    local idBytes, profileOf = bytesOf(ids), bytesOf(sub(arg, 3 + 4 * m))
    local parts, last = nil, -1
    for i = 1, m do
      local a, b, c = idBytes[4 * i - 3], idBytes[4 * i - 2], idBytes[4 * i - 1]
      local page = (a * 256 + b) * 256 + c
      if page ~= last then
        if parts then pageArgs[#pageArgs + 1] = concat(parts) end
        parts, last = { char(r, 0, a, b, c) }, page
      end
      parts[#parts + 1] = char(idBytes[4 * i], profileOf[i])
    end
    if parts then pageArgs[#pageArgs + 1] = concat(parts) end
  end
  return pageArgs
end
