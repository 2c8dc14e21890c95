-- The "+windows" line of a user whose sends after the call are times[1..n] (onChannel in step), with the
-- call's send at `at` when `appended`: "<retry at>", then per cap of its profile "<used> <reset at>":
--   used: the sends in the cap's fullest window (x - W, x] containing `at` (decide()'s rule);
--   reset at: when that window's oldest send ages out (its time + W), `at` when it holds none; a calendar
--   cap's (calendar-window.lua): the sends of the period holding `at`, and its end (`at` when it holds none);
--   retry at (0 unless capped, and then 0 when a cap of 0 means never): the earliest time after `at` at
--   which every window around it has room. A window around x empties only as a send leaves it at t + W,
--   and a calendar cap's only as a period ends, so those times are the candidates, tried in order with
--   fullestAround() itself (0 too when the open last period of a calendar cap is full, beyond its boundaries).
-- Cost: binary searches per cap over an inPlaceList() (liveSends()), or else a sort of the sends gathered for
-- the decision (two lists at most: the channel's, every channel's); the reply holds numbers per cap only.
local function windowsLine(profile, n, times, onChannel, appended, capped)
  local listOf, countOf = {}, {}
  local function listFor(every)
    local key = every and 2 or 1
    local list = listOf[key]
    if list == nil and times.inPlace then
      -- read in place: the same sorted sends for every cap (liveSends() made sure)
      list = inPlaceList(times.record, times.lo, times.hi, appended)
      listOf[1], listOf[2], countOf[1], countOf[2] = list, list, n + (appended and 1 or 0), n + (appended and 1 or 0)
    elseif list == nil then
      list = {}
      local count = 0
      for i = 1, n do
        if every or onChannel[i] then
          count = count + 1
          list[count] = times[i]
        end
      end
      if appended then
        count = count + 1
        list[count] = at
      end
      table.sort(list)
      listOf[key], countOf[key] = list, count
    end
    return list, countOf[key]
  end
  local windows, maxima, everyChannel, periods = profile.windows, profile.maxima, profile.everyChannel, profile.periods
  local line = {}
  for cap = 1, #windows do
    local window, period = windows[cap], periods[cap]
    local list, count = listFor(everyChannel[cap])
    if period then
      local used = countWithin(list, count, period[1], period[2])
      line[cap + 1] = string.format('%d %.0f', used, used > 0 and period[2] or at)
    else
      local used, oldest = fullestAround(list, count, at, window)
      line[cap + 1] = string.format('%d %.0f', used, used > 0 and list[oldest] + window or at)
    end
  end
  local retryAt = 0
  if capped then
    local never = false
    for cap = 1, #windows do never = never or maxima[cap] == 0 end
    if not never then
      -- No x below `lowest` is allowed: its window (x - W, x] still holds every send after x - W up to `at`,
      -- which for x below list[j] + W (j: the max-th send at or before `at`, counted back) are max or more.
      -- So each cap's candidates start there, and they are tried in ascending order by merging the caps'
      -- ascending lists: a capped check costs binary searches, not a pass over the sends of its windows.
      local lowest, nextOf = at + 1, {}
      for cap = 1, #windows do
        local list, count = listFor(everyChannel[cap])
        local j = countUpTo(list, count, at) - maxima[cap] + 1
        if j >= 1 and not periods[cap] and list[j] + windows[cap] > lowest then lowest = list[j] + windows[cap] end
      end
      for cap = 1, #windows do
        local window, period = windows[cap], periods[cap]
        local list, count = listFor(everyChannel[cap])
        if period then
          -- a calendar cap's candidates are its periods' ends
          local i = 2
          while period[i] and period[i] < lowest do i = i + 1 end
          nextOf[cap] = i
        else
          nextOf[cap] = math.max(countUpTo(list, count, at - window), countUpTo(list, count, lowest - window - 1)) + 1
        end
      end
      retryAt = at + 1 -- not reached: after the last candidate every window is empty
      local tried
      while true do
        local x, from
        for cap = 1, #windows do
          local list, count = listFor(everyChannel[cap])
          local i, period = nextOf[cap], periods[cap]
          local candidate = period and period[i] or not period and i <= count and list[i] + windows[cap]
          if candidate and (x == nil or candidate < x) then x, from = candidate, cap end
        end
        if x == nil then break end
        nextOf[from] = nextOf[from] + 1
        if x ~= tried then
          tried = x
          -- a full window (y - W, y] around x holds every candidate up to y too: the search goes on after the
          -- latest such y of any cap, so a long capped stretch costs a search per window length, not per send
          local past
          for cap = 1, #windows do
            local list, count = listFor(everyChannel[cap])
            local period, y = periods[cap]
            if period then y = fullPeriodEnd(period, list, count, x, maxima[cap])
            else y = lastFullEnd(list, count, x, windows[cap], maxima[cap]) end
            if y and (past == nil or y > past) then past = y end
          end
          if past == nil or past == math.huge then
            retryAt = past == nil and x or 0
            break
          end
          for cap = 1, #windows do
            local list, count = listFor(everyChannel[cap])
            local period = periods[cap]
            if period then
              while period[nextOf[cap]] and period[nextOf[cap]] <= past do nextOf[cap] = nextOf[cap] + 1 end
            else
              nextOf[cap] = math.max(nextOf[cap], countUpTo(list, count, past - windows[cap]) + 1)
            end
          end
        end
      end
    end
  end
  line[1] = string.format('%.0f', retryAt)
  return concat(line, ' ', 1, #windows + 1) .. '\n'
end

-- Appends the "+windows" line of a user just decided (`code`) from the sends gathered for the decision; a
-- capped user's retry time can lie past every window around `at`, so its record is read onward for it.
local function reportWindows(profile, block, class, record, n, times, onChannel, code, recorded)
  local capped = code >= REPLY_FIRST_CAP
  if capped and record then n, times, onChannel = liveSends(profile, block, class, record, true) end
  call.windowLines[#call.windowLines + 1] = windowsLine(profile, n, times, onChannel, recorded, capped)
end
