-- Sets every per-call local from the call's keys and arguments (the header above states them): the tables the
-- functions fill start empty, the flags false. Returns an error reply, or nothing.
local function beginCall(keys, args)
  byte, sub, char, floor, concat, unpackList, format, find = string.byte, string.sub, string.char, math.floor,
    table.concat, unpack, string.format, string.find
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
  onCallChannel, identityByNumber, repeatedOf = {}, {}, {}
  myNumber, myNumberWritten, myNumberStamped, stateRead = nil, false, false, false
  reply, replyParts, windowLines = {}, {}, {}
  scratchTimes, scratchOnChannel, scratchIsMine = {}, {}, {}
  records, blobOfUser, inHash, identityTableTtl, recordOutcomes = {}, {}, {}, 0, {}
  markedPagesToWrite = {}
  return readProfiles(args[7], args[8])
end
