-- The call's time (`now` below): the caller's clock as far as the store can check it, so no single caller's
-- clock can move a slot group's windows on, or date its spends early, by stepping.
-- * Within STORE_BOUND_MS behind the store's clock (storeNow, store-now.lua) and never ahead of it: a clock
--   stepped forward would otherwise move the rings on and age every key's counts early, and a clock behind
--   by more (a constant offset) would start a slot group's time back, its grants then leaving every window
--   early when the next caller moves the rings on. A caller outside the bound counts as the nearest time in
--   it, so a slot group's time stays within STORE_BOUND_MS of the store's and never runs faster than it by
--   more than that: the margin strict's spends count over (STAMP_SKEW_MS) covers it.
-- * An instance's time moves on as its own clock moved since its previous applied sync (its clock and the
--   time it was given then are kept), never back: an instance whose clock steps back goes on from the time it
--   had (a clock stepped back would otherwise date its spent tokens early), one whose clock stepped forward
--   and was held to the store's time goes on from there. A constant offset between two clocks is kept.
-- * Never behind the slot group's latest time (no caller rewinds the group).
-- In the seq hash, beside the instances' records: "#clock" the group's latest time, "#c:<instance>" the
-- instance's clock and time at its previous applied sync (no instance id holds a "#": the protocol refuses it).
local CLOCK_FIELD = '#clock'
local STORE_BOUND_MS = STAMP_SKEW_MS
local callClock, ownClock = nil, nil -- what an applied call writes (packed)

local function ownClockField(instance)
  return '#c:' .. instance
end

local function callTime(callerNow, cfgKey, sequences, instance, reading)
  local store = storeNow(cfgKey)
  local clocks = rcall('HMGET', sequences, CLOCK_FIELD, ownClockField(instance))
  local at = callerNow
  local own = clocks[2]
  if own and #own == 16 then
    local callerBefore, before = sunpack('<dd', own)
    at = before + max(callerNow - callerBefore, 0)
  end
  if at > store then at = store elseif at < store - STORE_BOUND_MS then at = store - STORE_BOUND_MS end
  local latest = clocks[1] and #clocks[1] == 8 and sunpack('<d', clocks[1]) or nil
  if latest and at < latest then at = latest end
  if not reading then
    callClock, ownClock = spack('<d', at), spack('<dd', callerNow, at)
  end
  return at
end
