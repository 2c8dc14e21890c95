-- Makes the call's table from its keys and arguments (the header above states them): the tables the parts
-- fill start empty, the flags false. Returns an error reply, or nothing.
local function beginCall(keys, args)
  byte, sub, char, floor, concat, unpackList, format, find = string.byte, string.sub, string.char, math.floor,
    table.concat, unpack, string.format, string.find
  call = {}
  call.now = tonumber(args[1])
  at = tonumber(args[2])
  call.peek = sub(args[3], 1, 4) == 'peek'
  call.withWindows = sub(args[3], -8) == '+windows'
  call.hotRecords = find(args[3], '+hot', 1, true) ~= nil
  call.compactClasses = find(args[3], '+compact', 1, true) ~= nil
  call.identity = args[4]
  call.channel = string.match(call.identity, '^[^:]*')
  call.anonymous = #call.identity == #call.channel + 1
  call.exemptCounted = args[5] == '1'
  call.horizon = tonumber(args[6])
  call.identityTableKey = keys[1]
  call.keyPrefix = args[9]
  call.rangeNames, call.ranges = {}, {}
  for range in string.gmatch(args[10], '%d+') do
    call.rangeNames[#call.rangeNames + 1] = range
    call.ranges[#call.rangeNames] = { root = call.keyPrefix .. 'u:' .. range, hashKey = call.keyPrefix .. 'r:' .. range,
      parts = {}, retention = 0, hashWrites = {}, hashDeletes = {} }
  end
  call.blobSplitBytes = tonumber(args[11])
  -- the call's tag, which every page argument must belong to: its block key is built from the prefix, so a
  -- page of another tag would be read and written under the wrong tag, unnoticed (functions/core/shared/keys.ts:
  -- a page of 256 IDs is in group page / 4, and a group's tag is group mod 256)
  call.callTag = tonumber(string.match(call.keyPrefix, '{(%d+)}:$') or nil)
  if call.identityTableKey ~= call.keyPrefix .. 'ids' or call.callTag == nil then
    return redis.error_reply('ERR cap-sends: key prefix ' .. call.keyPrefix .. ' does not name the tag of ' ..
      call.identityTableKey)
  end
  call.onCallChannel, call.identityByNumber, call.repeatedOf = {}, {}, {}
  call.myNumber, call.myNumberWritten, call.myNumberStamped, call.stateRead = nil, false, false, false
  call.reply, call.replyParts, call.windowLines = {}, {}, {}
  call.scratchTimes, call.scratchOnChannel, call.scratchIsMine = {}, {}, {}
  records, call.blobOfUser, call.inHash, call.identityTableTtl, call.recordOutcomes = {}, {}, {}, 0, {}
  call.markedPagesToWrite, call.chunkEdits = {}, {}
  return readProfiles(args[7], args[8])
end
