local function emptyBlock()
  return { width = 1, compactAt = MIN_COMPACT_AT, classLimit = MIN_CLASS_LIMIT, identities = {}, times = {},
    eventIdentities = {}, classes = {}, userClasses = repeated('\0\0', PAGE_USERS) }
end
local function readBlock(key)
  local blob = redis.call('GET', key)
  if not blob then return nil end
  local format, width, compactAt, classLimit, identities, times, eventIdentities, classes, userClasses =
    cmsgpack.unpack(blob)
  userClasses = storedClasses.read(userClasses, format)
  if userClasses == nil then return redis.error_reply('ERR cap-sends: unknown block format in ' .. key) end
  -- one class for the whole page: the page's bytes are the same string at every page of the call
  if #userClasses == 2 then userClasses = repeated(userClasses, PAGE_USERS) end
  return { width = width, compactAt = compactAt, classLimit = classLimit, identities = identities,
    times = times, eventIdentities = eventIdentities, classes = classes, userClasses = userClasses }
end

-- Drops unused classes, and when the event count reached its threshold, also the events no user's class
-- refers to or older than now - horizon, renumbered by first use, with the identities and classes they need
-- (the narrowest width for the count). `users` (the page's class bytes, 2 per user) is rewritten in place.
-- Cost: one pass over the page's 256 users, and for an event compaction each class's bytes once, in C.
local function compact(block, users)
  if #block.times < block.compactAt then
    -- classes only: histories keep their bytes, only their numbers change. On a page whose histories
    -- diverged this runs at nearly every write, so the loop calls no function (math.floor is a C call)
    local classMap, classes, oldClasses, count = falses(#block.classes), {}, block.classes, 0
    classMap[0] = 0
    for o = 1, 2 * PAGE_USERS - 1, 2 do
      local class = users[o] * 256 + users[o + 1]
      local renumbered = classMap[class]
      if not renumbered then
        count = count + 1
        classes[count] = oldClasses[class]
        renumbered = count
        classMap[class] = renumbered
      end
      local low = renumbered % 256
      users[o], users[o + 1] = (renumbered - low) / 256, low
    end
    block.classes = classes
    block.classLimit = math.max(MIN_CLASS_LIMIT, count + floor(count / 2))
    return
  end
  local eventMap, identityMap, kept = {}, {}, { [0] = false }
  local identities, times, eventIdentities, classes, classIndex = {}, {}, {}, {}, {}
  local cutoff = call.now - call.horizon
  local oldTimes, oldEventIdentities, oldIdentities = block.times, block.eventIdentities, block.identities
  for o = 1, 2 * PAGE_USERS - 1, 2 do
    local class = users[o] * 256 + users[o + 1]
    if kept[class] == nil then
      local parts = {}
      local numbers = eventsOfClass(block.classes[class], block.width)
      for i = 1, #numbers do
        local e = numbers[i]
        local newEvent = eventMap[e]
        if newEvent == nil then
          newEvent = false
          local t = oldTimes[e]
          if t > cutoff then
            local oldIdentity = oldEventIdentities[e]
            local newIdentity = identityMap[oldIdentity]
            if newIdentity == nil then
              identities[#identities + 1] = oldIdentities[oldIdentity]
              newIdentity = #identities
              identityMap[oldIdentity] = newIdentity
            end
            times[#times + 1] = t
            eventIdentities[#eventIdentities + 1] = newIdentity
            newEvent = #times
          end
          eventMap[e] = newEvent
        end
        if newEvent then parts[#parts + 1] = newEvent end
      end
      kept[class] = parts
    end
  end
  local width = #times < 128 and 1 or (#times < 30000 and 2 or 3)
  local classMap = { [0] = 0 }
  for o = 1, 2 * PAGE_USERS - 1, 2 do
    local class = users[o] * 256 + users[o + 1]
    local renumbered = classMap[class]
    if renumbered == nil then
      renumbered = 0
      local parts = kept[class]
      if parts and #parts > 0 then
        local history = encodeClass(parts, width)
        renumbered = classIndex[history]
        if renumbered == nil then
          classes[#classes + 1] = history
          renumbered = #classes
          classIndex[history] = renumbered
        end
      end
      classMap[class] = renumbered
    end
    local low = renumbered % 256
    users[o], users[o + 1] = (renumbered - low) / 256, low
  end
  block.identities, block.times, block.eventIdentities, block.classes = identities, times, eventIdentities, classes
  block.width = width
  block.compactAt = math.min(math.max(MIN_COMPACT_AT, 2 * #times), WIDTH_LIMIT[width])
  block.classLimit = math.max(MIN_CLASS_LIMIT, #classes + floor(#classes / 2))
end

local function classesOfUsers(userClasses)
  local bytes, classOfUser = { byte(userClasses, 1, 2 * PAGE_USERS) }, {}
  for offset = 0, PAGE_USERS - 1 do classOfUser[offset] = bytes[2 * offset + 1] * 256 + bytes[2 * offset + 2] end
  return classOfUser
end
