-- A key stored under another layout (b4, or b3's header), as a header of this one (or nil: a header that does
-- not match its layout). Each window's count is known, not when it was counted: every ring starts with its
-- windows' largest count in the latest bucket (now's, or the old rings' when they are ahead), so each window
-- counts at least what it held, for up to a window more (an over-count, never an under-count: strict stays
-- exact). A window the old layout did not have takes the
-- largest count of the old ones (history it never kept is not known), except strict's grants, which start
-- at 0 as their tokens are counted spent; approximate counts what strict held in both parts, and strict
-- counts what approximate held as spent.
local function carriedOver(oldLayout, header, windows)
  local parts = {}
  for kind, w in string.gmatch(oldLayout, ',(%a)(%d+)/%d+') do parts[#parts + 1] = { kind = kind, w = tonumber(w) } end
  -- a header holds at most 3 + 4 doubles per part (a ring's cursor and two latest buckets, a window's sum)
  local doubles = #header / 8
  if doubles ~= floor(doubles) or doubles < 3 + #parts or doubles > 3 + 4 * #parts then return nil end
  local old = { sunpack('<' .. string.rep('d', doubles), header) }
  local byPart, byWindow, largest = {}, {}, 0
  for j, part in ipairs(parts) do
    local sum = old[doubles - #parts + j]
    byPart[part.kind .. part.w] = sum
    byWindow[part.w] = (byWindow[part.w] or 0) + sum
    if byWindow[part.w] > largest then largest = byWindow[part.w] end
  end
  -- where the old rings stand: the first ring's cursor (4th double, in b3 and b4) in buckets of the first
  -- part's size (a ring of reservations or grants: 50 ms up to 5 s, W/100 beyond, in every layout so far)
  local firstW = parts[1] and parts[1].w or 0
  local latest = (old[4] or 0) * (firstW <= 5000 and 50 or firstW / 100)
  local stored = { old[1], old[2], old[3] }
  for r = 1, #ringList do
    local ring = ringList[r]
    local seed = 0
    for _, window in ipairs(ring.windows) do
      local sum = byPart[window.kind .. window.w]
      if sum == nil then
        if window.kind == 'g' then sum = 0 else sum = byWindow[window.w] or largest end
      end
      if sum > seed then seed = sum end
    end
    -- a slot holds at most SLOT_MAX (a window's sum may be more): far beyond any max, so the window stays full
    if seed > SLOT_MAX then seed = SLOT_MAX end
    ring.seed = seed
    -- in the latest bucket: now's, or the old rings' if they are ahead (a caller whose clock is behind
    -- never rewinds a ring; spent tokens' windows are STAMP_SKEW_MS longer for callers ahead)
    stored[1 + 3 * r], stored[2 + 3 * r], stored[3 + 3 * r] = floor(max(now, latest) / ring.q), seed, 0
  end
  for j, window in ipairs(windows) do stored[3 + 3 * #ringList + j] = window.ring.seed end
  return stored
end

-- the doubles of a b3 blob's header: demand, its time, the mark, each ring's cursor, each window's sum (rings
-- as b3 laid them out: grants' and approximate's shared per bucket size, 50 ms up to 5 s and W/100 beyond;
-- spent tokens' one per limit)
local function b3HeaderDoubles(oldLayout)
  local rings, parts, seen = 0, 0, {}
  for kind, w in string.gmatch(oldLayout, ',(%a)(%d+)/%d+') do
    parts = parts + 1
    w = tonumber(w)
    local name = kind .. (w <= 5000 and 50 or w / 100)
    if kind == 's' or not seen[name] then rings, seen[name] = rings + 1, true end
  end
  return 3 + rings + parts
end
