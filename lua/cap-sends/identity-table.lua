-- Identity numbers of user records, read once per call.
local function identityOfNumber(number)
  local known = call.identityByNumber[number]
  if known == nil then
    known = redis.call('HGET', call.identityTableKey, 'n:' .. number) or false
    call.identityByNumber[number] = known
  end
  return known
end
-- An identity is dropped once no kept send can name it: unused (no send of it written) for the horizon, plus
-- the 5 minutes a send may be stamped ahead of the clock that wrote it, plus 1 for the clocks of callers.
local IDENTITY_MARGIN_MS = 6 * 60000
-- numbers looked at per number given: the sweep moves faster than numbers are given, so it keeps coming round
local IDENTITY_SWEEP = 3
-- Looks at the next IDENTITY_SWEEP numbers of the sweep and drops those unused for long enough. The sweep
-- goes round the numbers from "floor" (below it every number is dropped) to the newest, so a round costs
-- what the live identities cost, not every number ever given. A number with no "t:" (written before
-- last-use times were kept) gets one now, so it waits a whole horizon too. `newest` is the number being
-- given to this call's identity (written with `writes`, its last use now); `sweepAt` and `floorAt` the
-- table's "sweep" and "floor"; the sweep's own writes are appended to `writes`.
local function sweepIdentities(newest, sweepAt, floorAt, writes)
  local floor = tonumber(floorAt or nil) or 1
  local from = math.max(tonumber(sweepAt or nil) or 1, floor)
  if from >= newest then from = floor end
  local fields = {}
  for number = from, from + IDENTITY_SWEEP - 1 do
    fields[#fields + 1] = 'n:' .. number
    fields[#fields + 1] = 't:' .. number
  end
  local found = redis.call('HMGET', call.identityTableKey, unpackList(fields))
  local stale = {}
  for i = 1, IDENTITY_SWEEP do
    local number, name, used = from + i - 1, found[2 * i - 1], tonumber(found[2 * i] or nil)
    if number == newest then name, used = call.identity, call.now end
    local gone = not name and number < newest
    if name and used == nil then
      writes[#writes + 1] = 't:' .. number
      writes[#writes + 1] = call.now
    elseif name and used + call.horizon + IDENTITY_MARGIN_MS < call.now then
      stale[#stale + 1] = 'i:' .. name
      stale[#stale + 1] = 'n:' .. number
      stale[#stale + 1] = 't:' .. number
      gone = true
    end
    if gone and number == floor then floor = number + 1 end
  end
  if #stale > 0 then redis.call('HDEL', call.identityTableKey, unpackList(stale)) end
  writes[#writes + 1] = 'sweep'
  writes[#writes + 1] = from + IDENTITY_SWEEP
  writes[#writes + 1] = 'floor'
  writes[#writes + 1] = floor
end

-- The fields of the identity table read with this call's "i:<identity>" (one HMGET, in readMarkers() or
-- here): what giving a number needs ("next", "sweep", "floor"), so a call that gives one reads the table once
-- more (the sweep's numbers) and writes it once.
local IDENTITY_STATE_FIELDS = { 'next', 'sweep', 'floor' }
-- Sets myNumber (false: the identity has none) and the numbering state from an HMGET reply of "i:<identity>"
-- then IDENTITY_STATE_FIELDS.
local function takeIdentity(found)
  call.myNumber, call.nextNumber, call.sweepAt, call.floorAt = tonumber(found[1] or nil) or false, found[2], found[3], found[4]
  call.stateRead = true
end
-- whether this call wrote a send of its identity into a user record (its "t:" is then set once, at the end,
-- or when the number is given: myNumberStamped)
local function myIdentityNumber(create)
  if call.myNumber == nil then
    takeIdentity(redis.call('HMGET', call.identityTableKey, 'i:' .. call.identity, unpackList(IDENTITY_STATE_FIELDS)))
  end
  if not call.myNumber and create then
    if not call.stateRead then
      local state = redis.call('HMGET', call.identityTableKey, unpackList(IDENTITY_STATE_FIELDS))
      call.nextNumber, call.sweepAt, call.floorAt, call.stateRead = state[1], state[2], state[3], true
    end
    -- the number after "next" (as HINCRBY gives it), its fields, its last use and the sweep's writes: one HSET
    call.myNumber = (tonumber(call.nextNumber or nil) or 0) + 1
    call.identityByNumber[call.myNumber] = call.identity
    local number = call.myNumber
    local writes = { 'next', number, 'i:' .. call.identity, number, 'n:' .. number, call.identity, 't:' .. number, call.now }
    sweepIdentities(call.myNumber, call.sweepAt, call.floorAt, writes)
    redis.call('HSET', call.identityTableKey, unpackList(writes))
    call.myNumberStamped = true
  end
  if create then call.myNumberWritten = true end
  return call.myNumber
end
