--[=[ cap-sends.lua: exact multi-window sliding-log frequency caps for many users in one call.

Each key holds the send logs of one block of 256 consecutive user IDs; every key of a call shares one hash
tag (the users' slot group), so one call decides every user of the group at once.

KEYS[k]    the group's block keys, always all 4 (a fixed key count lets the client route the call by its
           first key); a block whose user argument is empty is not read
ARGV[1]    now: ms since the epoch; a cap counts the sends in (now - window, now]
ARGV[2]    mode: "count" records allowed sends; "peek" decides the same way and writes nothing; with "+log"
           ("count+log", "peek+log") the reply also carries each user's log after the decision
ARGV[3]    horizon, ms: sends at or before now - horizon no longer count and are dropped when the block is
           compacted; a written key expires `horizon` after its newest send
ARGV[4]    identity: "<channel>:<campaign ID>"; the channel name has no ":". An empty campaign ID means no
           identity (every send counts). A send whose identity is already in the user's log is a duplicate.
ARGV[5]    caps by profile: profiles separated by "|", caps by ",", a cap is "windowMs:max:scope" with scope
           1 = counts every channel ("*"), 0 = counts the identity's channel only. Profile p is the p-th.
ARGV[5+k]  users of KEYS[k] (may be empty): 2 bytes each, offset in block (0..255) and profile number (255:
           count without checking caps, for exempt sends that count), no repeats
Reply      one byte per user in argument order: 0 allowed (counted), 1 duplicate (counted before, nothing
           changes), 2 exempt (counted without checks), 3+i capped by cap i (0-based) of its profile.
           With "+log", then each user's log as it is after this call, in argument order: a line
           "<time ms> <identity>\n" per send (expired ones included; users are told apart by the caller,
           which asks for one user)

Block value: cmsgpack of (format 3, newest, compactAt, classLimit, identities, times, eventIdentities,
classes, users). The sends of one call share a time and an identity, and the users of a block mostly share
their histories, so both are stored once per block:
  - event e: a send time times[e] (ms) and an identity identities[eventIdentities[e]];
  - class c: a history, the string of 2-byte big-endian event numbers classes[c];
  - users: 512 bytes, each user's class number (2 bytes big endian, by offset; 0 = no sends).
Numbers stay stable, so a call reads and changes only what its users need. When the event count reaches
compactAt or the class count reaches classLimit, expired events and unused identities and classes are
dropped and the rest renumbered.
]=]

local now = tonumber(ARGV[1])
local peek = string.sub(ARGV[2], 1, 4) == 'peek'
local withLog = string.sub(ARGV[2], -4) == '+log'
local horizon = tonumber(ARGV[3])
local identity = ARGV[4]
local channel = string.match(identity, '^[^:]*')
local anonymous = #identity == #channel + 1
local cutoff = now - horizon
local byte, sub, char, floor, concat = string.byte, string.sub, string.char, math.floor, table.concat
local FORMAT, MIN_COMPACT_AT, MIN_CLASS_LIMIT = 3, 32, 256
local BLOCK_USERS = 256
local NO_SENDS = string.rep('\0', 2 * BLOCK_USERS)

-- Caps by profile: for each cap, its window's lower bound, its max and whether it counts every channel.
local capLo, capMax, capAll = {}, {}, {}
do
  local p = 0
  for profile in string.gmatch(ARGV[5] .. '|', '([^|]*)|') do
    local lo, mx, all = {}, {}, {}
    for w, m, s in string.gmatch(profile, '(%d+):(%d+):(%d)') do
      lo[#lo + 1] = now - tonumber(w)
      mx[#mx + 1] = tonumber(m)
      all[#all + 1] = s == '1'
    end
    capLo[p], capMax[p], capAll[p] = lo, mx, all
    p = p + 1
  end
end

local u16s = {}
local function u16(n)
  local s = u16s[n]
  if s == nil then
    s = char(floor(n / 256), n % 256)
    u16s[n] = s
  end
  return s
end

-- Keeps only live events that some user's history refers to, renumbered by first use, and the identities
-- and classes they need. `users` (the unpacked class bytes) is rewritten in place.
local function compact(identities, times, eventIdentities, classes, users)
  local eventMap, identityMap, classMap, historyIndex = {}, {}, { [0] = 0 }, {}
  local newIdentities, newTimes, newEventIdentities, newClasses = {}, {}, {}, {}
  local newest = 0
  for o = 1, 2 * BLOCK_USERS - 1, 2 do
    local c = users[o] * 256 + users[o + 1]
    local nc = classMap[c]
    if nc == nil then
      local history, parts = classes[c], {}
      for q = 1, #history, 2 do
        local eh, el = byte(history, q, q + 1)
        local e = eh * 256 + el
        local ne = eventMap[e]
        if ne == nil then
          ne = false
          local t = times[e]
          if t > cutoff then
            local id = eventIdentities[e]
            local ni = identityMap[id]
            if ni == nil then
              newIdentities[#newIdentities + 1] = identities[id]
              ni = #newIdentities
              identityMap[id] = ni
            end
            newTimes[#newTimes + 1] = t
            newEventIdentities[#newEventIdentities + 1] = ni
            ne = #newTimes
            if t > newest then newest = t end
          end
          eventMap[e] = ne
        end
        if ne then parts[#parts + 1] = u16(ne) end
      end
      nc = 0
      if #parts > 0 then
        local h = concat(parts)
        nc = historyIndex[h]
        if nc == nil then
          newClasses[#newClasses + 1] = h
          nc = #newClasses
          historyIndex[h] = nc
        end
      end
      classMap[c] = nc
    end
    users[o], users[o + 1] = floor(nc / 256), nc % 256
  end
  return newIdentities, newTimes, newEventIdentities, newClasses, newest
end

local reply, nreply = {}, 0
local logs = {}
local counts = {}

for k = 1, #KEYS do
  local key, argUsers = KEYS[k], ARGV[5 + k]
  if #argUsers > 0 then
    local blob = redis.call('GET', key)
    local format, newest, compactAt, classLimit, identities, times, eventIdentities, classes, userClasses
    if blob then
      format, newest, compactAt, classLimit, identities, times, eventIdentities, classes, userClasses = cmsgpack.unpack(blob)
      if format ~= FORMAT then return redis.error_reply('ERR cap-sends: unknown block format in ' .. key) end
    else
      newest, compactAt, classLimit, identities, times, eventIdentities, classes, userClasses =
        0, MIN_COMPACT_AT, MIN_CLASS_LIMIT, {}, {}, {}, {}, NO_SENDS
    end
    local users = { byte(userClasses, 1, 2 * BLOCK_USERS) }
    local mine
    for i = 1, #identities do
      if identities[i] == identity then mine = i break end
    end
    local identityChannel = {}
    for i = 1, #identities do identityChannel[i] = string.match(identities[i], '^[^:]*') end

    -- What each event means for this call, worked out the first time a history refers to it.
    local alive, ofMine, hits = {}, {}, {}
    for profile, lo in pairs(capLo) do
      local h = {}
      for i = 1, #lo do h[i] = {} end
      hits[profile] = h
    end
    local function learn(e)
      local t, id = times[e], eventIdentities[e]
      alive[e] = t > cutoff
      ofMine[e] = id == mine and not anonymous
      local own = identityChannel[id] == channel
      local counted = t <= now
      for profile, lo in pairs(capLo) do
        local all, h = capAll[profile], hits[profile]
        for i = 1, #lo do h[i][e] = counted and t > lo[i] and (own or all[i]) end
      end
    end

    -- The decision for a user of `profile` whose history is class `c` (0: no sends).
    local function judge(profile, c)
      local forced = profile == 255
      local h, mx = hits[profile], capMax[profile]
      local ncaps = forced and 0 or #mx
      for i = 1, ncaps do counts[i] = 0 end
      local duplicate = false
      local history = c > 0 and classes[c] or ''
      for q = 1, #history, 2 do
        local eh, el = byte(history, q, q + 1)
        local e = eh * 256 + el
        local a = alive[e]
        if a == nil then
          learn(e)
          a = alive[e]
        end
        if a then
          if ofMine[e] then duplicate = true end
          for i = 1, ncaps do
            if h[i][e] then counts[i] = counts[i] + 1 end
          end
        end
      end
      if duplicate then return 1 end
      if forced then return 2 end
      for i = 1, ncaps do
        if counts[i] >= mx[i] then return 2 + i end
      end
      return 0
    end

    -- The class a history of class `c` becomes with this call's send appended (expired sends dropped).
    local newEntry, historyIndex
    local function appendTo(c)
      if newEntry == nil then
        if mine == nil then
          identities[#identities + 1] = identity
          mine = #identities
        end
        local last = #times
        if last == 0 or times[last] ~= now or eventIdentities[last] ~= mine then
          last = last + 1
          times[last] = now
          eventIdentities[last] = mine
        end
        newEntry = u16(last)
        historyIndex = {}
        for i = 1, #classes do historyIndex[classes[i]] = i end
      end
      local parts, history = {}, c > 0 and classes[c] or ''
      for q = 1, #history, 2 do
        local eh, el = byte(history, q, q + 1)
        -- judge() has learned every event of this history
        if alive[eh * 256 + el] then parts[#parts + 1] = sub(history, q, q + 1) end
      end
      parts[#parts + 1] = newEntry
      local h = concat(parts)
      local nc = historyIndex[h]
      if nc == nil then
        classes[#classes + 1] = h
        nc = #classes
        historyIndex[h] = nc
      end
      return nc
    end

    -- Per user only table lookups: decisions per (profile, class) and the class after an append are
    -- worked out once per call, because users of a block mostly share a history.
    local verdicts, written = {}, false
    local nextHi, nextLo = {}, {}
    local userBytes = { byte(argUsers, 1, #argUsers) }
    for u = 1, #userBytes, 2 do
      local o, profile = userBytes[u] * 2 + 1, userBytes[u + 1]
      local c = users[o] * 256 + users[o + 1]
      local byClass = verdicts[profile]
      if byClass == nil then
        if profile ~= 255 and capMax[profile] == nil then
          return redis.error_reply('ERR cap-sends: unknown profile ' .. profile)
        end
        byClass = {}
        verdicts[profile] = byClass
      end
      -- a verdict is the decision, negated when the send is to be recorded (0 is recorded too: see below)
      local verdict = byClass[c]
      if verdict == nil then
        verdict = judge(profile, c)
        if (verdict == 0 or verdict == 2) and not peek then verdict = -verdict - 1 end
        byClass[c] = verdict
      end
      nreply = nreply + 1
      if verdict < 0 then
        reply[nreply] = -verdict - 1
        local hi = nextHi[c]
        if hi == nil then
          local nc = appendTo(c)
          hi = floor(nc / 256)
          nextHi[c], nextLo[c] = hi, nc % 256
        end
        users[o], users[o + 1] = hi, nextLo[c]
        written = true
      else
        reply[nreply] = verdict
      end
    end

    -- the log as this call leaves it, read before a compaction renumbers the tables
    if withLog then
      for u = 1, #userBytes, 2 do
        local o = userBytes[u] * 2 + 1
        local c = users[o] * 256 + users[o + 1]
        local history = c > 0 and classes[c] or ''
        for q = 1, #history, 2 do
          local hi, lo = byte(history, q, q + 1)
          local e = hi * 256 + lo
          logs[#logs + 1] = string.format('%.0f %s\n', times[e], identities[eventIdentities[e]])
        end
      end
    end

    if written then
      if now > newest then newest = now end
      if #times >= compactAt or #classes >= classLimit then
        identities, times, eventIdentities, classes, newest = compact(identities, times, eventIdentities, classes, users)
        compactAt = math.max(MIN_COMPACT_AT, 2 * #times)
        classLimit = math.max(MIN_CLASS_LIMIT, 2 * #classes)
      end
      local value = cmsgpack.pack(FORMAT, newest, compactAt, classLimit, identities, times, eventIdentities, classes,
        char(unpack(users)))
      redis.call('SET', key, value, 'PX', math.max(1, newest + horizon - now))
    end
  end
end

-- one byte per user; string.char takes the decisions in slices that stay within Lua's stack limit
local out = {}
for first = 1, nreply, 4000 do
  out[#out + 1] = char(unpack(reply, first, math.min(first + 3999, nreply)))
end
return concat(out) .. concat(logs)
