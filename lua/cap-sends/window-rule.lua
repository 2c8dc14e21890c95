-- Whether some window (x - window, x] containing `at` holds `max` of the sorted times near[1..count] (the
-- sends of one cap's channel(s) after max(at - window, cutoff) and before at + window). windowsLine() reports
-- the same windows by fullestAround(); test/integration/frequency-windows.test.ts holds both to one reference.
local function fullWindow(near, count, window, max)
  table.sort(near)
  -- the windows (x - W, x] containing `at` have x in [at, at + W); the count only rises at x = at and at a
  -- send's time, so those are the right ends to try
  local rightEnd, first, last, nextSend = at, 1, 0, 1
  while true do
    while last < count and near[last + 1] <= rightEnd do last = last + 1 end
    while first <= count and near[first] <= rightEnd - window do first = first + 1 end
    if last - first + 1 >= max then return true end
    while nextSend <= count and near[nextSend] <= rightEnd do nextSend = nextSend + 1 end
    if nextSend > count then return false end
    rightEnd = near[nextSend]
  end
end

-- The reply code for a user of `profile` whose sends are given by event: times[events[i]], and
-- onChannel[events[i]] / isMine[events[i]] (`events` nil: the sends are 1..n themselves). Sends at or before
-- the profile's cutoff do not count. Cost: a pass over the sends per cap, and a sort of the sends near `at`
-- only for a cap they could fill; a user with fewer sends than the profile's smallest max needs no pass.
local function decideUnderMaxima(profile, n, events, times, onChannel, isMine, anyMine)
  local cutoff = profile.cutoff
  if anyMine and not call.anonymous then
    for i = 1, n do
      local e = events and events[i] or i
      if isMine[e] and times[e] > cutoff then return REPLY_DUPLICATE end
    end
  end
  if call.exemptCounted then return REPLY_EXEMPT end
  if n < profile.least then return 0 end
  local windows, maxima, everyChannel, periods = profile.windows, profile.maxima, profile.everyChannel, profile.periods
  for cap = 1, #windows do
    local window, max = windows[cap], maxima[cap]
    if max == 0 then return REPLY_FIRST_CAP + cap - 1 end
    if periods[cap] then
      if n >= max and periodFull(periods[cap], max, n, events, times, onChannel, everyChannel[cap], cutoff) then
        return REPLY_FIRST_CAP + cap - 1
      end
    elseif n >= max then
      local from, to, every = at - window, at + window, everyChannel[cap]
      if cutoff > from then from = cutoff end
      -- counted first: the sends are gathered (and sorted) only when they could fill a window
      local count = 0
      for i = 1, n do
        local e = events and events[i] or i
        local t = times[e]
        if t > from and t < to and (every or onChannel[e]) then count = count + 1 end
      end
      if count >= max then
        local near = {}
        count = 0
        for i = 1, n do
          local e = events and events[i] or i
          local t = times[e]
          if t > from and t < to and (every or onChannel[e]) then
            count = count + 1
            near[count] = t
          end
        end
        if fullWindow(near, count, window, max) then return REPLY_FIRST_CAP + cap - 1 end
      end
    end
  end
  return 0
end
local function decideSends(profile, n, events, times, onChannel, isMine, anyMine)
  local code = decideUnderMaxima(profile, n, events, times, onChannel, isMine, anyMine)
  if code < REPLY_FIRST_CAP or not profile.full then return code end
  return displacedOr(code, decideUnderMaxima(profile.full, n, events, times, onChannel, isMine, anyMine))
end

-- The reply code for a user of `profile` whose live sends are given (times, onChannel, isMine; n of them), or
-- read in place from a user record (times.inPlace: liveSends() states when) by decideInPlace(), defined below.
local decideInPlace
local function decide(profile, n, times, onChannel, isMine)
  if times.inPlace then return decideInPlace(profile, n, times) end
  return decideSends(profile, n, nil, times, onChannel, isMine, true)
end
