-- The inside of a Lua pattern set matching the bytes `numbers` (ascending, 1..255): runs of 3 or more as
-- ranges (events numbered in time order make a window's events one range, matched by one comparison per
-- byte), other bytes one by one, non-alphanumeric ones escaped with %. A range never starts or ends at a
-- byte the set syntax gives a meaning to (% ] ^ -).
local SET_SPECIAL = { [37] = true, [93] = true, [94] = true, [45] = true }
local function patternSet(numbers)
  local parts, i = {}, 1
  while i <= #numbers do
    local first = numbers[i]
    local last, j = first, i
    if not SET_SPECIAL[first] then
      while j < #numbers and numbers[j + 1] == last + 1 and not SET_SPECIAL[last + 1] do
        j = j + 1
        last = numbers[j]
      end
    end
    if last - first >= 2 then
      parts[#parts + 1] = char(first) .. '-' .. char(last)
      i = j + 1
    else
      local c = char(first)
      parts[#parts + 1] = string.find(c, '%w') and c or '%' .. c
      i = i + 1
    end
  end
  return concat(parts)
end

-- whether a page argument's (offset, profile) pairs hold profile `number` (a byte at an odd position from 7)
local function isProfileOf(spec, number)
  local key, from = char(number), 7
  while true do
    local found = string.find(spec, key, from, true)
    if found == nil then return false end
    if found % 2 == 1 then return true end
    from = found + 1
  end
end
-- whether some user of a page has a record (`records`: readPageRecords())
local function anyRecord(records)
  if records == nil then return false end
  for i = 1, #records do
    if records[i] then return true end
  end
  return false
end
-- A block-path page argument without its held users' pairs (profile HELD_PROFILE): for the per-user loop, which
-- decides only the others and leaves a held user's class as it was.
local function withoutHeld(spec)
  local kept = { sub(spec, 1, 5) }
  for u = 6, #spec, 2 do
    if byte(spec, u + 1) ~= HELD_PROFILE then kept[#kept + 1] = sub(spec, u, u + 1) end
  end
  return concat(kept)
end
-- How many held users a page argument holds: its profile bytes HELD_PROFILE, counted in C (an offset byte 255 can
-- only be the last pair's, as offsets ascend).
local function heldCountOf(spec)
  local _, count = string.gsub(sub(spec, 6), HELD, HELD)
  return count - (byte(spec, #spec - 1) == HELD_PROFILE and 1 or 0)
end
