-- The rule of a call, prepared from its text (cached per text: a node holds few rules, and a policy that
-- changes often starts the cache again past PREPARED_MAX texts):
--   limits (w, max, bucket q, parts, first and second part, strict's floor), windows (the parts: w,
--   kind, span, ring, and per key their sum), ringList (q, kind, size, base in 'r', windows; per key
--   cur, hot0, hot1, vals, zero, dirty), ringsOf (rings by kind), reserveRings, and the layout and
--   formats of a key stored under it.
local PREPARED_MAX = 64
local prepared, preparedCount = {}, 0
local function prepare(ruleText)
  local P = prepared[ruleText]
  if P then return P end
  -- the rule: mode|leaseMs|fallback|slotGroups|W:max,W:max
  local mode, lease, limitsText = string.match(ruleText, '^(%a+)|(%d+)|%a+|%d+|(.+)$')
  lease = tonumber(lease)
  local strict = mode == 'strict'
  -- A limit's window sum is the sum of its parts, each a running sum over the last `span` buckets of a
  -- ring (rings are per bucket size and kind, shared by the limits that have them):
  --   approximate: one part 'a' of W/bucket + 1 buckets (reservations and usage; the extra bucket so the
  --     ring never misses the part of (now - W, now] that precedes its oldest bucket's start);
  --   strict: 'g', grants not yet reported spent, over every bucket that touches (now - W - lease, now]
  --     (a token may be spent until its lease ends), and 's', tokens reported spent, counted from their
  --     stamp (or the report) over 101 buckets of W/100 and the ones that cover STAMP_SKEW_MS (each was
  --     spent before the stamp that says so, on the reporter's clock).
  local limits, windows, ringList = {}, {}, {}
  -- shared rings by kind, then bucket size (numbers as keys: turning a number into text costs thousands of
  -- instructions)
  local rings = { a = {}, g = {} }
  local longest, slowest = 0, nil
  local function addPart(limit, kind, span, q)
    -- strict's spent tokens have a ring per limit: what a report moves there depends on the limit
    local shared = rings[kind]
    local ring = shared and shared[q]
    if not ring then
      ring = { q = q, kind = kind, size = 0, windows = {} }
      if shared then shared[q] = ring end
      ringList[#ringList + 1] = ring
    end
    local part = { w = limit.w, kind = kind, span = span, ring = ring }
    windows[#windows + 1] = part
    limit.parts[#limit.parts + 1] = part
    ring.windows[#ring.windows + 1] = part
    if span > ring.size then ring.size = span end
    if span * q > longest then longest = span * q end
  end
  for w, m in string.gmatch(limitsText, '(%d+):(%d+)') do
    w, m = tonumber(w), tonumber(m)
    local limit = { w = w, max = m, q = w <= 5000 and 50 or w / 100, parts = {} }
    limits[#limits + 1] = limit
    if strict then
      addPart(limit, 'g', math.ceil((w + lease) / limit.q) + 1, limit.q)
      -- spent tokens in W/100 buckets (10 ms for 1 s): a spent token holds the limit until the end of the
      -- bucket its W ends in, so a bucket of W/20 (the grants') held each token about 5 % past W, and the
      -- fleet, spending as capacity frees, about a whole bucket past it (utilisation ~95 % at best); then
      -- the buckets that cover STAMP_SKEW_MS (one for W >= 1 s)
      local q = w / SPENT_BUCKETS
      addPart(limit, 's', SPENT_BUCKETS + 1 + math.ceil(STAMP_SKEW_MS / q), q)
    else
      addPart(limit, 'a', math.ceil(w / limit.q) + 1, limit.q)
    end
    limit.first, limit.second = limit.parts[1], limit.parts[2]
    -- strict grants from at least twice what a bucket frees at the limit's rate (below)
    limit.floor = 2 * m * limit.q / w
    if slowest == nil or m / w < slowest then slowest = m / w end
  end

  -- a key's stored counts are kept across a change of max, dropped when the bucket layout changes; the
  -- leading tag is the storage format (a key stored as b3, one blob, is converted: its counts are kept)
  local shape = mode
  -- %d, not `..`: a number concatenated is formatted as a float (%.14g), several times dearer
  for _, part in ipairs(windows) do shape = shape .. string.format(',%s%d/%d', part.kind, part.w, part.span) end
  local layout, previousLayout = 'b4|' .. shape, 'b3|' .. shape

  local RINGS = #ringList
  local HEADER = 3 + 3 * RINGS + #windows
  local HEADER_FORMAT = '<' .. string.rep('d', HEADER)
  -- where the windows' sums start in the header
  local SUMS_AT = 3 + 3 * RINGS
  local offset = 0
  for _, ring in ipairs(ringList) do
    ring.base = offset
    ring.vals = {}
    offset = offset + ring.size * SLOT_BYTES
  end
  local RING_BYTES = offset
  -- the rings of each kind, and those a grant is reserved in (every kind but strict's spent tokens)
  local ringsOf, reserveRings = { a = {}, g = {}, s = {} }, {}
  for _, ring in ipairs(ringList) do
    local list = ringsOf[ring.kind]
    list[#list + 1] = ring
    if ring.kind ~= 's' then reserveRings[#reserveRings + 1] = ring end
  end
  -- the b3 format: one blob 'b', the header (demand, its time, the mark, each ring's cursor, each window's
  -- sum) then the rings' slots as in 'r'
  local B3_HEADER = 3 + RINGS + #windows
  local B3_FORMAT = '<' .. string.rep('d', B3_HEADER)
  local KEY_TTL = math.ceil(longest) + 2000

  P = {
    mode = mode, lease = lease, strict = strict, limits = limits, windows = windows, ringList = ringList,
    ringsOf = ringsOf, reserveRings = reserveRings, longest = longest, slowest = slowest, layout = layout,
    previousLayout = previousLayout, RINGS = RINGS, HEADER = HEADER, HEADER_FORMAT = HEADER_FORMAT,
    SUMS_AT = SUMS_AT, RING_BYTES = RING_BYTES, B3_HEADER = B3_HEADER, B3_FORMAT = B3_FORMAT,
    KEY_TTL = KEY_TTL,
  }
  if preparedCount >= PREPARED_MAX then prepared, preparedCount = {}, 0 end
  prepared[ruleText], preparedCount = P, preparedCount + 1
  return P
end
