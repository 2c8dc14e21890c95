local function runBlockPage(spec, blockKey, hashIndex, pageBase, pageName)
  local block = readBlock(blockKey)
  if type(block) == 'table' and block.err then return block end
  local existed = block ~= nil
  block = block or emptyBlock()
  local records = readPageRecords(hashIndex, pageBase, spec)
  local times = block.times

  -- per event: whether it is on the call's channel and the call's own send, worked out once per page
  local eventOwn, eventMine, anyMine, oldest
  local function learnEvents()
    eventOwn, eventMine, anyMine, oldest = {}, {}, false, math.huge
    local identities, eventIdentities = block.identities, block.eventIdentities
    local ownIdentity, mineIdentity = {}, {}
    for i = 1, #identities do
      ownIdentity[i] = isOnCallChannel(identities[i])
      mineIdentity[i] = identities[i] == call.identity
      if mineIdentity[i] then anyMine = true end
    end
    for e = 1, #times do
      local i = eventIdentities[e]
      eventOwn[e], eventMine[e] = ownIdentity[i], mineIdentity[i]
      if times[e] < oldest then oldest = times[e] end
    end
  end
  local function addEvent(t, eventIdentity)
    local identityIndex
    for i = 1, #block.identities do
      if block.identities[i] == eventIdentity then identityIndex = i break end
    end
    if identityIndex == nil then
      block.identities[#block.identities + 1] = eventIdentity
      identityIndex = #block.identities
    end
    times[#times + 1] = t
    block.eventIdentities[#block.eventIdentities + 1] = identityIndex
    if eventOwn then
      -- anyMine stays as the block had it: an event added now is only in classes made by this call, which
      -- are never decided in it (each user is decided once, on the class it had), so the duplicate check
      -- that anyMine turns on (a decode of every class decided) has nothing more to find
      eventOwn[#times], eventMine[#times] = isOnCallChannel(eventIdentity), eventIdentity == call.identity
      if t < oldest then oldest = t end
    end
    return #times
  end
  -- the call's send as a block event, added on first use
  local newEvent
  local function callEvent()
    if newEvent == nil then newEvent = addEvent(at, call.identity) end
    return newEvent
  end

  -- decoded classes, once per class per call
  local decoded = {}
  local function eventsOf(class)
    local numbers = decoded[class]
    if numbers == nil then
      numbers = class > 0 and eventsOfClass(block.classes[class], block.width) or {}
      decoded[class] = numbers
    end
    return numbers
  end
  -- A profile whose users on this page have many different classes (histories that diverged) counts, per
  -- cap, the sends of a class that some window of that cap containing `at` could hold with one
  -- string.gsub over the class's bytes against the set of those events (1-byte event numbers): no table per
  -- user. Only a class whose count reaches the cap's max is decoded and decided send by send. A profile
  -- deciding few classes on the page (the dense case, or 64 segments × 32 caps) does not build the sets.
  local SETS_AFTER = 8
  -- Per profile, worked out once per page: the caps a class is counted against, in cap order (a cap's
  -- max, and its set, or true when the set is every event, or the reply code of a cap of 0). A cap whose
  -- window can hold fewer of the page's events than its max is left out: a class holds an event once, so
  -- none reaches it (a diverged page's late-week call then counts nothing at all). Only the events the block
  -- had are looked at: one this call adds is only in classes it makes, which it never decides.
  local classesDecided, countPlans, eventsBefore = {}, {}, #times
  local function countPlanOf(profile)
    local windows, maxima, everyChannel, cutoff = profile.windows, profile.maxima, profile.everyChannel, profile.cutoff
    -- the sets match 1-byte event numbers: a wider block's plan only says which caps are kept (allowsEvery())
    local byteSets = block.width == 1
    local plan = { count = 0, maxima = {}, sets = {}, byteSets = byteSets }
    for cap = 1, #windows do
      local max, set = maxima[cap], false
      if max == 0 then
        set = REPLY_FIRST_CAP + cap - 1
      else
        local window = windows[cap]
        local from, to, every = at - window, at + window, everyChannel[cap]
        if cutoff > from then from = cutoff end
        local members = {}
        for e = 1, eventsBefore do
          local t = times[e]
          if t > from and t < to and (every or eventOwn[e]) then members[#members + 1] = e end
        end
        if #members >= max then
          -- every event of the page: a class's count is its length
          set = #members == eventsBefore or not byteSets or '[' .. patternSet(members) .. ']'
        end
      end
      if set then
        local k = plan.count + 1
        plan.count, plan.maxima[k], plan.sets[k] = k, max, set
      end
    end
    return plan
  end
  local function decideClass(profileNumber, profile, class)
    if eventOwn == nil then learnEvents() end
    local decided = (classesDecided[profileNumber] or 0) + 1
    classesDecided[profileNumber] = decided
    if decided >= SETS_AFTER and class > 0 and block.width == 1 and not call.exemptCounted
      and not (anyMine and not call.anonymous) then
      local history = block.classes[class]
      local n = #history
      if n < profile.least then return 0 end
      local plan = countPlans[profileNumber]
      if plan == nil then
        plan = countPlanOf(profile)
        countPlans[profileNumber] = plan
      end
      local maxima, sets, undecided = plan.maxima, plan.sets, not plan.byteSets
      for k = 1, undecided and 0 or plan.count do
        local max, set = maxima[k], sets[k]
        if max == 0 then return set end
        if n >= max then
          local count = n
          if set ~= true then count = select(2, string.gsub(history, set, '')) end
          if count >= max then
            undecided = true
            break
          end
        end
      end
      if not undecided then return 0 end
    end
    local numbers = eventsOf(class)
    return decideSends(profile, #numbers, numbers, times, eventOwn, eventMine, anyMine)
  end

  -- Per profile: whether every user of it on this page is allowed whatever its class, because the count plan
  -- keeps no cap (every cap's window around `at` holds fewer of the page's events than its max, and no max is
  -- 0) and no send of the call's identity can be a duplicate: then no class is decided at all (a diverged
  -- page's late-week call of the busy week, ~128 users with a class each). Worked out once per profile.
  local allAllowed = {}
  local function allowsEvery(profileNumber, profile)
    local allowed = allAllowed[profileNumber]
    if allowed == nil then
      if eventOwn == nil then learnEvents() end
      allowed = false
      if not call.exemptCounted and not (anyMine and not call.anonymous) then
        local plan = countPlans[profileNumber]
        if plan == nil then
          plan = countPlanOf(profile)
          countPlans[profileNumber] = plan
        end
        allowed = plan.count == 0
      end
      allAllowed[profileNumber] = allowed
    end
    return allowed
  end

  -- the class of a history made in this call: a new class, shared by the users that reach the same history.
  -- Every such history holds an event added by this call, so it never equals a class the block already had:
  -- only this call's classes are indexed (not the block's hundreds, when histories diverged)
  -- The successor of a class that only takes the call's send (no event of the page is past the profile's
  -- cutoff) is the same for every profile: indexed by the old class (an array sized once), not by its bytes
  -- (a string key is a hash node per new class)
  local newClasses, plainSuccessors = {}, nil
  local function classOfHistory(history)
    local class = newClasses[history]
    if class == nil then
      block.classes[#block.classes + 1] = history
      class = #block.classes
      newClasses[history] = class
    end
    return class
  end
  -- the call's event in the block's width, once encoded
  local callEventBytes
  -- absorbed records can add many events at once: widen before a number outgrows the width
  local function fitWidth()
    if #times <= WIDTH_LIMIT[block.width] then return end
    local wider = #times > WIDTH_LIMIT[2] and 3 or 2
    for i, history in ipairs(block.classes) do
      block.classes[i] = encodeClass(eventsOfClass(history, block.width), wider)
    end
    block.width = wider
    block.compactAt = math.min(block.compactAt, WIDTH_LIMIT[wider])
    newClasses, plainSuccessors, callEventBytes = {}, nil, nil
  end
  -- the class of `class`'s history for `profile` with `extra` event numbers appended (sends at or before the
  -- profile's cutoff dropped); the bytes are appended as they are when no event of the page is that old
  -- (`extra` nil: the call's send only)
  local function successorOf(profile, class, extra)
    if eventOwn == nil then learnEvents() end
    local tail
    if extra then
      fitWidth()
      tail = encodeClass(extra, block.width)
    else
      if callEventBytes == nil then
        local e = callEvent()
        fitWidth()
        callEventBytes = encodeNumber(e, block.width)
      end
      tail = callEventBytes
    end
    if class == 0 then return classOfHistory(tail) end
    if oldest <= profile.cutoff then
      local live = {}
      local numbers = eventsOf(class)
      for i = 1, #numbers do
        if times[numbers[i]] > profile.cutoff then live[#live + 1] = numbers[i] end
      end
      return classOfHistory(encodeClass(live, block.width) .. tail)
    end
    if extra then return classOfHistory(block.classes[class] .. tail) end
    local successors = plainSuccessors
    if successors == nil then
      successors = falses(#block.classes)
      plainSuccessors = successors
    end
    local successor = successors[class]
    if not successor then
      local classes = block.classes
      successor = #classes + 1
      classes[successor] = classes[class] .. tail
      successors[class] = successor
    end
    return successor
  end

  -- per (profile, class), for users without a record: the reply code when nothing is recorded, else minus one
  -- minus the class after the append (a recorded send's code is the same for the whole call)
  local recordedCode = call.exemptCounted and REPLY_EXEMPT or 0
  local absorbed, written, longestRetention = {}, false, 0

  -- The block's value with the users' class bytes (a string, or a table of bytes), written once per page;
  -- `uniform`: the 2 bytes of every user's class when they share one (stored alone).
  local function writeBlock(userClasses, uniform)
    if #times >= block.compactAt or #block.classes >= block.classLimit then
      local bytes = type(userClasses) == 'table' and userClasses or { byte(userClasses, 1, 2 * PAGE_USERS) }
      compact(block, bytes)
      userClasses, uniform = bytes, nil
    end
    if type(userClasses) == 'table' then userClasses = char(unpackList(userClasses)) end
    local ttl = ttlFor(longestRetention)
    if existed then ttl = math.max(ttl, redis.call('PTTL', blockKey)) end
    -- the marker that tells record-path calls to read this block lives at least as long as the block
    if not existed then call.markedPagesToWrite[#call.markedPagesToWrite + 1] = pageName end
    call.identityTableTtl = math.max(call.identityTableTtl, ttl)
    redis.call('SET', blockKey, storedClasses.packed(block, userClasses, uniform), 'PX', ttl)
    for _, userId in ipairs(absorbed) do storeRecord(hashIndex, userId, false, 0) end
  end

  -- A page whose users all share one history (every page of a dense campaign, until segments' caps tell them apart)
  -- is decided once per segment present, with no Lua per user: the reply and the new class bytes are string.rep()
  -- of one code and one class when every segment present decides alike, else the call's (offset, profile) bytes
  -- with each pair replaced by its profile's code and class (string.gsub; a held user's by HELD and its class).
  -- New class bytes are written this way only when the call holds the whole page, held users included (its users
  -- ascend, so the pairs are offsets 0..255 in order). A user with a record, a call reporting windows, or a part
  -- of a page with something to write takes the per-user loop below. (every user has the first user's class
  -- when the bytes are the first user's repeated: strings are interned, so once the call made that string, the
  -- comparison is one pointer's; the last user is looked at first, so a page whose histories diverged rarely makes it)
  local userClasses, classBytes = block.userClasses, sub(block.userClasses, 1, 2)
  if not call.withWindows and sub(userClasses, -2) == classBytes and userClasses == repeated(classBytes, PAGE_USERS)
    and not anyRecord(records) then
    local class = byte(classBytes, 1) * 256 + byte(classBytes, 2)
    local userCount, held = (#spec - 5) / 2, isProfileOf(spec, HELD_PROFILE)
    local replyCount = held and userCount - heldCountOf(spec) or userCount
    local codeOf, outcomeOf, firstCode, alike, anyRecorded = { [HELD] = HELD }, {}, nil, true, false
    for profileNumber = 0, call.profileCount - 1 do
      if isProfileOf(spec, profileNumber) then
        local key = char(profileNumber)
        local outcome = decideClass(profileNumber, call.profiles[profileNumber], class)
        local code = outcome
        if not call.peek and (outcome == 0 or outcome == REPLY_EXEMPT) then
          anyRecorded = true
          code = recordedCode
        end
        outcomeOf[key], codeOf[key] = outcome, char(code)
        if firstCode == nil then firstCode = code elseif code ~= firstCode then alike = false end
      end
    end
    local wholePage = userCount == PAGE_USERS
    if firstCode == nil then return redis.error_reply('ERR cap-sends: unknown profile in ' .. blockKey) end
    if not anyRecorded or wholePage then
      local codes = alike and repeated(char(firstCode), replyCount) or string.gsub(sub(spec, 6), '.(.)', codeOf)
      if #codes ~= userCount and not alike then return redis.error_reply('ERR cap-sends: unknown profile in ' .. blockKey) end
      -- a held user's code is HELD (no reply code is that byte): dropped once the count is checked
      if held and not alike then codes = string.gsub(codes, HELD, '') end
      appendReply(codes)
      if not anyRecorded then return end
      local successorBytes, firstSuccessor, sameSuccessor = {}, nil, true
      for key, outcome in pairs(outcomeOf) do
        local bytes = classBytes
        if outcome == 0 or outcome == REPLY_EXEMPT then
          local profile = call.profiles[byte(key)]
          local nextClass = successorOf(profile, class, nil)
          bytes = char(floor(nextClass / 256), nextClass % 256)
          if profile.retention > longestRetention then longestRetention = profile.retention end
        end
        successorBytes[key] = bytes
        if firstSuccessor == nil then firstSuccessor = bytes elseif bytes ~= firstSuccessor then sameSuccessor = false end
      end
      if held then successorBytes[HELD], sameSuccessor = classBytes, sameSuccessor and firstSuccessor == classBytes end
      if sameSuccessor then return writeBlock(repeated(firstSuccessor, PAGE_USERS), firstSuccessor) end
      return writeBlock((string.gsub(sub(spec, 6), '.(.)', successorBytes)))
    end
  end

  -- held users keep their classes: only the others are in the loop (`records` holds only theirs)
  if isProfileOf(spec, HELD_PROFILE) then spec = withoutHeld(spec) end
  -- the page's class numbers, 2 bytes per user (offset o: users[2o + 1] * 256 + users[2o + 2])
  local users = { byte(block.userClasses, 1, 2 * PAGE_USERS) }
  local specBytes = { byte(spec, 6, #spec) }
  local outcomes = {}
  local r = #call.reply
  for u = 1, #specBytes, 2 do
    local profileNumber = specBytes[u + 1]
    local o = specBytes[u] * 2 + 1
    local class = users[o] * 256 + users[o + 1]
    local byClass = outcomes[profileNumber]
    if byClass == nil then
      if call.profiles[profileNumber] == nil then
        return redis.error_reply('ERR cap-sends: unknown profile ' .. profileNumber)
      end
      -- keyed by the class each user had before the call (a user is decided once, on that class)
      byClass = falses(#block.classes)
      outcomes[profileNumber] = byClass
    end
    r = r + 1
    local value = records and records[(u + 1) / 2]
    if value or call.withWindows then
      -- a user with a record (or a call reporting windows): decided over the block's class and the record
      local profile = call.profiles[profileNumber]
      local record = value and readRecord(value) or nil
      local n, liveTimes, onChannel, isMine, duplicate = liveSends(profile, block, class, record)
      local code = duplicate and REPLY_DUPLICATE or decide(profile, n, liveTimes, onChannel, isMine)
      call.reply[r] = code
      local recorded = not call.peek and (code == 0 or code == REPLY_EXEMPT)
      if recorded then
        local extra = {}
        if record then
          for _, send in ipairs(allSends(record)) do
            local sendIdentity = identityOfNumber(send[2])
            if send[1] > profile.cutoff and sendIdentity then extra[#extra + 1] = addEvent(send[1], sendIdentity) end
          end
          absorbed[#absorbed + 1] = pageBase + specBytes[u]
        end
        extra[#extra + 1] = callEvent()
        local nextClass = successorOf(profile, class, extra)
        local low = nextClass % 256
        users[o], users[o + 1] = (nextClass - low) / 256, low
        written = true
        if profile.retention > longestRetention then longestRetention = profile.retention end
      end
      if call.withWindows then
        reportWindows(profile, block, class, record, n, liveTimes, onChannel, code, recorded)
      end
    else
      local outcome = byClass[class]
      if not outcome then
        local profile = call.profiles[profileNumber]
        local allowed = allAllowed[profileNumber]
        if allowed == nil then allowed = allowsEvery(profileNumber, profile) end
        outcome = allowed and 0 or decideClass(profileNumber, profile, class)
        if not call.peek and (outcome == 0 or outcome == REPLY_EXEMPT) then
          -- successorOf()'s plain path without the call, once its first use has set it up
          local successor
          if plainSuccessors and class > 0 and oldest > profile.cutoff then
            successor = plainSuccessors[class]
            if not successor then
              local classes = block.classes
              successor = #classes + 1
              classes[successor] = classes[class] .. callEventBytes
              plainSuccessors[class] = successor
            end
          else
            successor = successorOf(profile, class, nil)
          end
          outcome = -1 - successor
          written = true
          if profile.retention > longestRetention then longestRetention = profile.retention end
        end
        byClass[class] = outcome
      end
      if outcome < 0 then
        call.reply[r] = recordedCode
        local nextClass = -1 - outcome
        local low = nextClass % 256
        users[o], users[o + 1] = (nextClass - low) / 256, low
      else
        call.reply[r] = outcome
      end
    end
  end

  if written then return writeBlock(users) end
end
