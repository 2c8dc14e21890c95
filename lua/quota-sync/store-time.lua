-- The call's time (`now` below): the caller's clock as far as the store can check it, so no single caller's
-- clock can move a slot group's windows on, or date its spends early, by stepping.
-- * Never ahead of the store's clock (TIME: a Redis Function reads the node's clock; Valkey 8 answers the
--   script's start, one read here): a clock stepped forward would otherwise move the rings on and age every
--   key's counts early. A caller ahead counts as the store's time.
-- * An instance's time moves on as its own clock moved since its previous applied sync (its clock and the
--   time it was given then are kept), never back: an instance whose clock steps back goes on from the time it
--   had (a clock stepped back would otherwise date its spent tokens early), one whose clock stepped forward
--   and was held to the store's time goes on from there. A constant offset between two clocks is kept.
-- * Never behind the slot group's latest time (no caller rewinds the group).
-- In the seq hash, beside the instances' records: "#clock" the group's latest time, "#c:<instance>" the
-- instance's clock and time at its previous applied sync (no instance id holds a "#": the protocol refuses it).
local CLOCK_FIELD = '#clock'
local callClock, ownClock = nil, nil -- what an applied call writes (packed)

local function ownClockField(instance)
  return '#c:' .. instance
end

local function callTime(callerNow, sequences, instance, reading)
  local t = rcall('TIME')
  local storeNow = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  local clocks = rcall('HMGET', sequences, CLOCK_FIELD, ownClockField(instance))
  local at = callerNow
  local own = clocks[2]
  if own and #own == 16 then
    local callerBefore, before = sunpack('<dd', own)
    at = before + max(callerNow - callerBefore, 0)
  end
  if at > storeNow then at = storeNow end
  local latest = clocks[1] and #clocks[1] == 8 and sunpack('<d', clocks[1]) or nil
  if latest and at < latest then at = latest end
  if not reading then
    callClock, ownClock = spack('<d', at), spack('<dd', callerNow, at)
  end
  return at
end
