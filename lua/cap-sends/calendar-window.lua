-- Calendar windows (a cap's "window": "day", "week" or "month" in the user's zone; calendar-windows.ts works the
-- periods out): ARGV[7]'s fifth array holds per cap the boundaries b[1] <= at < b[2] < ... < b[k] of the periods
-- from the one holding `at` until past every send the store can hold (a rolling cap's is empty). A send counts
-- in the period holding its own time, and one at `at` is allowed only while [b[1], b[2]) holds fewer than max:
-- one window, no right ends to try. After b[k] nothing is known of the zone's periods: [b[k], ...) is one.

-- Per cap of a profile, its boundaries, or false for a rolling cap: the unpacked array itself, a rolling cap's
-- empty array replaced (a new table grown cap by cap cost more than the rest of a profile's parse); without
-- periods, an empty table (every cap rolling).
local function periodsOf(packed, caps)
  if not packed then return {} end
  for cap = 1, caps do
    local period = packed[cap]
    if type(period) ~= 'table' or period[1] == nil then packed[cap] = false end
  end
  return packed
end

-- Whether the period holding `at` holds `max` of the sends times[events[i]] (i = 1..n; `events` nil: 1..n)
-- after the cutoff and on the cap's channel(s) (`every`, or onChannel[e]): a pass, nothing sorted.
local function periodFull(period, max, n, events, times, onChannel, every, cutoff)
  local from, to, count = math.max(period[1], cutoff + 1), period[2], 0
  for i = 1, n do
    local e = events and events[i] or i
    local t = times[e]
    if t >= from and t < to and (every or onChannel[e]) then
      count = count + 1
      if count >= max then return true end
    end
  end
  return false
end

-- The period [from, to) of the boundaries holding x (x >= period[1]); `to` is nil for the open last one.
local function periodAround(period, x)
  local k = #period
  while period[k] > x do k = k - 1 end
  return period[k], period[k + 1]
end
