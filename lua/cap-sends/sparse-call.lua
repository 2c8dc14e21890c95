-- A whole sparse call in C string functions: a call whose users come by range (every user on the record path,
-- no "+windows"), each range's users either new to an empty blob or a run of its users (the same audience
-- again). A range's users arrive as the blob's own ID section (4 bytes each) and a byte of profile each; a
-- new blob takes the IDs once string.gsub has checked each is of the call's tag, a run is compared whole with
-- the blob's IDs; a range whose users share a profile and a record is decided once and its blob made by
-- string.rep and slices: no Lua per user (the general path's lookups, tables and edits cost ~20k instructions a
-- user). Any other call (a page with a block, a busy user, users scattered in a blob or in the old-layout hash,
-- a directory) is left to the general path: runSparseCall() returns nil having written nothing but a new
-- identity number, with the set of marked pages once read (readMarkers()).
-- Returns true when done (the replies and each edited blob's new value set).
local function runSparseCall(args)
  if call.withWindows then return nil end
  local plans, sections, userCount = {}, {}, 0
  for r, range in ipairs(call.ranges) do
    local arg = args[FIRST_PAGE_ARG + r]
    local m = (#arg - 2) / 5
    local blob = range.single
    if m > 0 then
      if not blob then return nil end
      local packed, profileBytes = sub(arg, 3, 2 + 4 * m), sub(arg, 3 + 4 * m)
      -- where the users are in the blob: none (an empty blob, no old-layout hash), or a run from `at` (its first
      -- and last users looked at first: a call reaching part of a range's audience leaves for the general path
      -- at the cost of a few C calls)
      local at = 0
      if blob.n > 0 then
        local value, firstId = blob.value, sub(packed, 1, 4)
        local search, stop = BLOB_HEADER + 1, blob.classNumbers - 1
        while at == 0 do
          local found = find(value, firstId, search, true)
          if found == nil or found > stop then return nil end
          if (found - BLOB_HEADER) % 4 == 1 then at = (found - BLOB_HEADER + 3) / 4 end
          search = found + 1
        end
        local lastAt = BLOB_HEADER + 4 * (at + m - 1)
        if lastAt > stop or sub(value, lastAt - 3, lastAt) ~= sub(packed, -4) then return nil end
        -- every user of the run, not only its ends: equal, its IDs are the blob's (of this tag)
        if sub(value, BLOB_HEADER + 4 * at - 3, lastAt) ~= packed then return nil end
      elseif range.hashExists then
        return nil
      else
        -- every ID of the call's tag (the general path refuses a page of another)
        if not allOfCallTag(packed) then return nil end
        -- and the IDs a blob keeps: ascending, unique, of this range (a run above is compared with such IDs)
        if not isRangeSection(packed, m, call.rangeNames[r]) then return notRangeSection(r) end
      end
      plans[#plans + 1] = { range, blob, packed, profileBytes, at, m }
      sections[#sections + 1] = packed
      userCount = userCount + m
    end
  end
  -- which pages have a block (the general path takes the set when a page has one); a sparse call has about
  -- as many pages as users
  local marked = readMarkers(args, userCount, sections)
  for page in pairs(marked) do
    for _, ids in ipairs(sections) do
      if hasPage(ids, page) then return nil, marked end
    end
  end
  local touched = {}
  for _, range in ipairs(call.ranges) do
    touched[#touched + 1] = range.root
    touched[#touched + 1] = range.hashKey
  end
  local probe = redis.pcall('EXISTS', unpackList(touched))
  if type(probe) == 'table' and probe.err then
    return redis.error_reply('TRYAGAIN cap-sends: a key of ' .. call.keyPrefix .. ' is not on this node: ' .. probe.err)
  end
  local codes, values = {}, {}
  for k, plan in ipairs(plans) do
    local value, count, classes
    codes[k], value, count, classes = sparseRange(unpackList(plan, 1, 6))
    if codes[k] == false then return nil, marked end
    values[k] = value and { value, count, classes }
  end
  for k, plan in ipairs(plans) do
    appendReply(codes[k])
    local blob, value = plan[2], values[k]
    if value then blob.newValue, blob.edited = value, true end
  end
  return true
end
