local function isRecorded(code) return not call.peek and (code == 0 or code == REPLY_EXEMPT) end

-- The TTL the identity table needs at least: its identities and page markers outlive what uses them.

-- The outcome for a user of profile `profileNumber` with record value `value` (false: none) and no block:
-- { reply code, the record after the call or false, the profile's retention }. Worked out once per (profile, value) per call: a
-- sparse campaign's users mostly hold the same record bytes (the same sends of the same campaigns), so a
-- call decides each distinct history once, as the block path does per class.
local NO_RECORD = false
local function recordOutcome(profileNumber, profile, value, userId)
  local byValue = call.recordOutcomes[profileNumber]
  if byValue == nil then
    byValue = {}
    call.recordOutcomes[profileNumber] = byValue
  end
  local outcome = byValue[value]
  if outcome == nil then
    local record = value and readRecord(value) or nil
    local n, times, onChannel, isMine, duplicate = liveSends(profile, nil, 0, record)
    local code = duplicate and REPLY_DUPLICATE or decide(profile, n, times, onChannel, isMine)
    outcome = { code, isRecorded(code) and recordWith(record, profile, at, myIdentityNumber(true), userId) or
      hot.listed(record, profile) or false, profile.retention }
    -- a chunked record is the user's own (its ID is in it): not an outcome other users can share
    if not (outcome[2] and byte(outcome[2], 1) >= CHUNKED_HEADER) then byValue[value] = outcome end
  end
  return outcome
end

-- Users of a page written through user records (read beforehand into `records`, by user ID); the page's
-- block, if any, is only read.
local function runRecordPage(spec, blockKey, hashIndex, pageBase, records, pageName, marked)
  -- only a page marked in the identity table can have a block: an unmarked one costs no read
  local block = marked and readBlock(blockKey) or nil
  if type(block) == 'table' and block.err then return block end
  if marked and block == nil and not call.peek then redis.call('HDEL', call.identityTableKey, pageName) end
  local classOfUser = block and classesOfUsers(block.userClasses)
  for index = 1, (#spec - 5) / 2 do
    local offset, profileNumber = byte(spec, 4 + 2 * index, 5 + 2 * index)
    local profile = call.profiles[profileNumber]
    if profile == nil then return redis.error_reply('ERR cap-sends: unknown profile ' .. profileNumber) end
    local userId = pageBase + offset
    local value = records[userId]
    local code, written
    if block or call.withWindows then
      local record = value and readRecord(value) or nil
      local class = classOfUser and classOfUser[offset] or 0
      local n, times, onChannel, isMine, duplicate = liveSends(profile, block, class, record)
      code = duplicate and REPLY_DUPLICATE or decide(profile, n, times, onChannel, isMine)
      local recorded = isRecorded(code)
      written = recorded and recordWith(record, profile, at, myIdentityNumber(true), userId) or
        hot.listed(record, profile)
      if call.withWindows then
        reportWindows(profile, block, class, record, n, times, onChannel, code, recorded)
      end
    else
      local outcome = recordOutcome(profileNumber, profile, value or NO_RECORD, userId)
      code, written = outcome[1], outcome[2]
    end
    call.reply[#call.reply + 1] = code
    if written then storeRecord(hashIndex, userId, written, profile.retention) end
  end
end
