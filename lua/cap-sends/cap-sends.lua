--[=[ cap-sends.lua: exact multi-window frequency caps for many users in one call, over the users' own
recent sends only.

A user's sends live in one of two places, both under the call's hash tag (one slot):
  - a page block: one key per page of 256 consecutive user IDs that a campaign reached densely; users of a
    page mostly share their histories, so a block stores each send (event) and each history (class) once;
  - a user record: one field per user, in a hash shared by the sparse users of a wide ID range, with the
    user's own sends: those its windows need (6-byte time + identity number each), then older ones kept
    to recognise a redelivery (readRecord() states the format). Single-user calls and sparse
    campaign users write here, so they never rewrite a page of 256 users.
A user's sends are the union of both. A page written through its block absorbs (and deletes) the user
records of the users it writes.

KEYS[1]          the tag's identity table (hash), "<prefix>ids", declared first (KEYS[2]: store-epoch.lua) (ioredis and
                 Redis Cluster route the call by it). "i:<identity>" -> number, "n:<number>" -> identity,
                 "t:<number>" -> when a call last wrote a send of it (now), "next" -> last number given,
                 "sweep"/"floor" -> where the pruning looks next / below which every number is dropped; user
                 records name identities by number.
                 Numbers are never reused; an identity unused for horizon + IDENTITY_MARGIN_MS is dropped
                 (no kept send can name it), a few numbers looked at whenever a number is given
Every other key is built here from the prefix ARGV[9] (the call's hash tag, so the same slot as KEYS[1]):
  "<prefix>u:<range>"  the record blob of a range of ARGV[10] (or its directory, then parts
                       "<prefix>u:<range>:<lowest ID>"): the users' records ("Record blobs" below states the format)
  "<prefix>r:<range>"  the range's hash of user records (field: decimal user ID): busy users' records, and
                       the layout before the blobs (read for users not in a blob, emptied as they are written);
                       a hot user's older sends in chunk fields "<user ID>:<seq>" (hot-record.lua)
  "<prefix>p:<page>"   a page block (page: decimal), read or written only for a page of the call, and only where
                       the identity table marks it ("p:<page>" -> 1: the page has a block) or it takes the block path
Redis lets a script touch undeclared keys of its slot; declaring only KEYS[1] keeps a call's fixed cost
(Redis' per-key checks, the client's slot hashing) independent of how many pages it holds. While a slot
migrates, Redis redirects the call by KEYS[1] alone, so every undeclared key the call may read is touched
before anything is written, and the call answers TRYAGAIN when one is not on this node.
ARGV[1]  now: the caller's clock (ms); retention and TTLs are measured from it, never from `at`
ARGV[2]  at: the send time (ms) being decided; may be ahead of now (skew) or behind it (backfill)
ARGV[3]  mode: "count" records allowed sends, "peek" writes nothing; "+windows" (last) appends each user's
         windows; "+hot" lets a record reaching HEAD_SENDS sends become a hot user's (hot-record.lua);
         "+compact" writes a page block's class numbers at their narrowest width (format 6, class-widths.lua)
ARGV[4]  identity: "<channel>:<campaign ID>"; an empty campaign ID is anonymous (no idempotency)
ARGV[5]  "1": exempt but counted (no cap is checked), "0": capped
ARGV[6]  horizon ms: the longest retention of any profile of the policy; a block compaction drops sends
         at or before now - horizon
ARGV[7]  caps of the call's profiles, msgpack: an array with per profile [windows ms[], maxima[],
         everyChannel[], fullMaxima[]?, periods[]?] (everyChannel 1: counts every channel's sends, 0: this
         channel's; maxima: what the call's priority may fill, each cap's max less its reserve for higher
         priorities; fullMaxima, present (or nil) when some reserve applies: the caps' own maxima, reserve.lua;
         periods, present when a calendar cap applies: per cap its period boundaries in the users' zone, empty
         for a rolling cap, calendar-window.lua); a profile may instead be [k, periods]: the first four of
         the call's earlier profile k (0-based) with these periods (a segment's calendar caps in another zone)
ARGV[8]  retentions of each profile, ","-separated, each "<kept ms>:<window ms>": a user's sends at or
         before now - kept are dropped whenever the user is written; in a user record, sends at or before
         now - window move to the tail, which a call reads only for a duplicate or when a window around
         `at` reaches it (after a policy change) (a bare "<kept ms>" means both are the same)
ARGV[9]  the key prefix "<namespace>:cap:{<tag>}:" (KEYS[1] must be "<prefix>ids")
ARGV[10] the record ranges the call reads, ","-separated (S of them, decimal)
ARGV[11] the size in bytes past which a record blob splits
ARGV[11+p] page p (1..P, P = #ARGV - 11): byte 1 the index (1..S) of its record range, byte 2 the path
         (1: block, 0: user records), bytes 3-5 the page number (user ID / 256, big endian), then per user
         2 bytes: offset in the page (0..255) and profile number (0-based in ARGV[7]); offsets ascending, no
         repeats; pages ascending. On a block-path page, profile 255 marks a held user (quiet hours): it gets
         no send, keeps its class and has no reply byte; it makes a page the batch reached whole one whole
         page (so it is decided once per profile and written with string functions), profiles then 0..254
         or, in a call whose pages all take the user records and which does not ask "+windows" (a sparse
         campaign's), ARGV[11+r] holds range r's users (r = 1..S, each range once): byte 1 r, byte 2 2, then
         each user's ID (4 bytes, big endian, ascending: a new blob takes them in this order), then each user's
         profile number (1 byte) in the same order; the script works on whole sections with C string
         functions (runSparseCall()), or makes the page arguments for the general path
Reply    one byte per user in argument order (held users have none): 0 allowed (counted), 1 duplicate, 2 exempt (counted without
         checks), 3+i capped by cap i (0-based) of its profile, 35+i displaced by cap i's reserve (allowed
         under the caps' own maxima, refused under the call's). With "+windows", then a line per user in
         argument order, "<retry at> <used> <reset at> ...\n" with a pair per cap of its profile, as of the
         user's sends after the call (windowsLine() states what each figure is); its size is the number of
         caps, whatever the user's history.

Exactness: a send at `at` is allowed only if, for each cap (window W, max m), every window (x - W, x] that
contains `at` holds fewer than m counted sends, so sends stamped ahead of `at` count as well as sends
behind it; for a calendar cap, the period holding `at` does.

Block value: cmsgpack of (format 5, width, compactAt, classLimit, identities, times, eventIdentities,
classes, userClasses): event e is (times[e], identities[eventIdentities[e]]); a class is a string of
`width`-byte event numbers; userClasses is 2 bytes per user (class number, 0 = no sends), or only 2 bytes
when every user of the page has that class (a dense campaign's page; format 4 always had 512); format 6
(written with "+compact") is format 5 with the class numbers at the narrowest width (class-widths.lua). Numbers stay
stable between compactions, which happen when the event count reaches compactAt (never beyond what
`width` can hold) or the class count reaches classLimit.
]=]

-- The standard library's functions used everywhere, as locals. A function library's top level runs with only
-- the `redis` API in reach (Redis 7.0: `string` is not a global at load), so beginCall() sets them.
local byte, sub, char, floor, concat, unpackList, format, find -- per call (the same functions every call)

-- The library is loaded once per primary (FUNCTION LOAD) and every function below is defined then, not per
-- call. What a call is about lives in one table, `call`, that beginCall() makes afresh from the call's keys
-- and arguments before anything reads it, so nothing of one call reaches the next and a chunk's 200 locals
-- go to functions and constants. Its fields: the arguments (now, peek, withWindows, identity, channel,
-- anonymous, exemptCounted, horizon, identityTableKey, keyPrefix, callTag, rangeNames, blobSplitBytes), the
-- profiles (profiles, profileCount), and what the parts gather as the call runs (each part names its own).
local call -- per call
-- the call's send time, read in most decisions (a local: parts name positions `at` too, .luacheckrc)
local at -- per call
local FIRST_PAGE_ARG = 11
-- byte 2 of an argument holding a range's users (a sparse call's format; a page argument's is its path, 0 or 1)
local RANGE_USERS = 2

local FORMAT, PAGE_USERS, MIN_COMPACT_AT, MIN_CLASS_LIMIT = 5, 256, 32, 256
local FUTURE_BOUND_MS = 300000
local REPLY_DUPLICATE, REPLY_EXEMPT, REPLY_FIRST_CAP = 1, 2, 3
-- a page argument's profile byte of a held user (no send, its class kept), and that byte as a string
local HELD_PROFILE, HELD = 255, '\255'
-- the largest event count each width can number, and the compaction threshold kept under it
local WIDTH_LIMIT = { 255, 65535, 16777215 }

--- @include "reserve"
--- @include "calendar-window"
--- @include "profiles"

--- @include "window-rule"

--- @include "identity-table"

--- @include "user-record"
--- @include "hot-record"

--- @include "class-numbers"

--- @include "repeats"

--- @include "class-widths"
--- @include "page-block"
--- @include "key-ttls"

--- @include "reply"
--- @include "block-page-checks"
--- @include "record-blobs"

--- @include "record-ranges"

--- @include "live-sends"

--- @include "windows-report"

--- @include "record-page"

-- Users of a page written through its block (created when missing); their user records are absorbed.
-- Per user only table lookups: decisions per (profile, class) and the class after an append are worked out
-- once per call, because users of a page mostly share a history.
--- @include "block-page"

--- @include "begin-call"

--- @include "sparse-range"
--- @include "page-markers"
--- @include "range-arguments"
--- @include "sparse-call"

-- The writes gathered (blobs, hashes, markers, the identity table's TTL), then the reply.
local function finishCall()
  local identityRetention = 0
  for _, range in ipairs(call.ranges) do
    writeRange(range, ttlFor(range.retention))
    identityRetention = math.max(identityRetention, range.retention)
  end
  if identityRetention > 0 then call.identityTableTtl = math.max(call.identityTableTtl, ttlFor(identityRetention)) end
  local markers = {}
  for _, pageName in ipairs(call.markedPagesToWrite) do
    markers[#markers + 1] = pageName
    markers[#markers + 1] = 1
  end
  if call.myNumberWritten and call.myNumber and not call.myNumberStamped then
    markers[#markers + 1] = 't:' .. call.myNumber
    markers[#markers + 1] = call.now
  end
  if #markers > 0 then redis.call('HSET', call.identityTableKey, unpackList(markers)) end
  if call.identityTableTtl > 0 then extendTableTtl(call.identityTableKey, call.identityTableTtl) end

  -- one byte per user
  flushReply()
  return concat(call.replyParts) .. concat(call.windowLines)
end

-- One call (FCALL): the pages of ARGV[12..], then the writes gathered, then the reply.
local function capSends(keys, args)
  local failure = beginCall(keys, args)
  if failure then return failure end
--- @include "store-epoch"
  local pageCount = #args - FIRST_PAGE_ARG
  local refused = readRangeRoots()
  if refused then
    return redis.error_reply('TRYAGAIN cap-sends: a key of ' .. call.keyPrefix .. ' is not on this node: ' .. refused.err)
  end

  -- a call of ranges' users (byte 2 of its first argument: RANGE_USERS) takes the sparse path, or is made page
  -- arguments for the general path
  local fetchedMarked
  if pageCount > 0 and byte(args[FIRST_PAGE_ARG + 1], 2) == RANGE_USERS then
    if pageCount ~= #call.ranges then
      return redis.error_reply(format('ERR cap-sends: %d arguments of users for %d ranges', pageCount, #call.ranges))
    end
    for r = 1, pageCount do
      local arg = args[FIRST_PAGE_ARG + r]
      local index, kind = byte(arg, 1, 2)
      if index ~= r or kind ~= RANGE_USERS or (#arg - 2) % 5 ~= 0 then
        return redis.error_reply(format('ERR cap-sends: argument %d is not the users of range %d', FIRST_PAGE_ARG + r,
          r))
      end
    end
    local sparse
    sparse, fetchedMarked = runSparseCall(args)
    if sparse then
      return sparse == true and finishCall() or sparse
    end
    local pageArgs, refused = pageArgsOf(args, pageCount)
    if refused then return refused end
    args, pageCount = {}, #pageArgs
    for p = 1, pageCount do args[FIRST_PAGE_ARG + p] = pageArgs[p] end
  end

  -- the user records of every page (one GET per blob), and from the identity table this call's identity number
  -- and which pages have a block (readMarkers(): marked[page number] set; a record-path page's is looked at, a
  -- block-path page reads its block anyway)
  local marked = {}
  -- each page argument's header, parsed once: its record hash, its path, its page number
  local pageHashes, pagePaths, pageBases = {}, {}, {}
  do
    local anyRecordPage = false
    for page = 1, pageCount do
      local spec = args[FIRST_PAGE_ARG + page]
      local hashIndex, path, a, b, c, firstOffset = byte(spec, 1, 6)
      local pageNumber, range = (a * 256 + b) * 256 + c, call.ranges[hashIndex]
      -- the tag: (page number / 4) mod 256, from its two low bytes
      if (b % 4) * 64 + (c - c % 4) / 4 ~= call.callTag or range == nil then
        return redis.error_reply(format('ERR cap-sends: page %d (record hash %d) is not of the tag of %s', pageNumber,
          hashIndex, call.identityTableKey))
      end
      -- its path (0 or 1: a range's users, RANGE_USERS, only come as every argument of a call), its users (an
      -- offset and a profile byte each, at least one) and its range (the page's high 3 bits)
      if (path ~= 0 and path ~= 1) or #spec < 7 or #spec % 2 == 0 or floor(a / 32) ~= tonumber(call.rangeNames[hashIndex]) then
        return redis.error_reply(format('ERR cap-sends: argument %d is not a page of users of range %s',
          FIRST_PAGE_ARG + page, call.rangeNames[hashIndex]))
      end
      local pageBase, ids = pageNumber * PAGE_USERS, range.ids
      pageHashes[page], pagePaths[page], pageBases[page] = hashIndex, path, pageBase
      if path == 0 then
        anyRecordPage = true
        local single = range.single
        -- a sparse page has one user: its page number and offset are its 4 ID bytes
        if #spec == 7 and single then
          lookUpUser(range, single, pageBase + firstOffset, sub(spec, 3, 6))
        else
          local packs, n = ids.packed, #ids + 1
          for u = 6, #spec, 2 do
            local offset = byte(spec, u)
            local id, packed = pageBase + offset, char(a, b, c, offset)
            if single then
              lookUpUser(range, single, id, packed)
            else
              ids[n], packs[n] = id, packed
              n = n + 1
            end
          end
        end
      else
        -- a block-path page's users are looked up only in a range that holds records (not per user otherwise)
        ids.blockPages[#ids.blockPages + 1] = spec
      end
    end
    -- a call of block-path pages only reads its identity number when a user record needs it
    if anyRecordPage then
      -- (already read when a sparse call was left to this path, with the identity number it may have made since)
      marked = fetchedMarked or readMarkers(args, pageCount)
    end
    -- Every undeclared key the call may read, touched once before anything is written: while the slot
    -- migrates, Redis refuses a script's access to a key that is not (or no longer) here, and a call that
    -- read a moved record as empty would decide wrong. Refused here, nothing is written and the call is
    -- answered TRYAGAIN, which the caller retries until the migration ends (declared keys get the same).
    -- (the blobs and hashes of every range too: an EXISTS of several keys is what the importing node refuses
    -- while one of them is missing; a single key missing there would read as empty)
    local touched = {}
    for _, range in ipairs(call.ranges) do
      touched[#touched + 1] = range.root
      touched[#touched + 1] = range.hashKey
    end
    for page = 1, pageCount do
      if pagePaths[page] == 1 or marked[pageBases[page] / PAGE_USERS] then
        touched[#touched + 1] = call.keyPrefix .. pageNameOf(pageBases[page] / PAGE_USERS)
      end
    end
    if #touched > 0 then
      local probe = redis.pcall('EXISTS', unpackList(touched))
      if type(probe) == 'table' and probe.err then
        return redis.error_reply('TRYAGAIN cap-sends: a key of ' .. call.keyPrefix .. ' is not on this node: ' .. probe.err)
      end
    end
    for hashIndex, range in ipairs(call.ranges) do
      local refused = readRange(hashIndex, range.ids)
      if refused then
        return redis.error_reply('TRYAGAIN cap-sends: a key of ' .. call.keyPrefix .. ' is not on this node: ' .. refused.err)
      end
    end
  end

  for page = 1, pageCount do
    local spec, hashIndex = args[FIRST_PAGE_ARG + page], pageHashes[page]
    local pageBase = pageBases[page]
    local failure
    if pagePaths[page] == 1 then
      local pageName = pageNameOf(pageBase / PAGE_USERS)
      failure = runBlockPage(spec, call.keyPrefix .. pageName, hashIndex, pageBase, pageName)
    elseif marked[pageBase / PAGE_USERS] or call.withWindows then
      -- the block's name only for a page that has one (a sparse call's pages mostly have none)
      local isMarked = marked[pageBase / PAGE_USERS] or false
      local pageName = isMarked and pageNameOf(pageBase / PAGE_USERS)
      failure = runRecordPage(spec, isMarked and call.keyPrefix .. pageName, hashIndex, pageBase, records, pageName,
        isMarked)
    else
      -- a record-path page without a block, and no windows to report (every page of a sparse campaign): each
      -- user's outcome is that of its (profile, record) pair, as runRecordPage() finds it, inline here (a
      -- function call per user costs what the rest of its decision does); a user in a range of one blob whose
      -- new record goes to the blob (storeRecord()'s rule) joins the blob's edits here too
      local range = call.ranges[hashIndex]
      local blob = range.single
      for u = 6, #spec, 2 do
        local offset, profileNumber = byte(spec, u, u + 1)
        local userId = pageBase + offset
        local value, byValue = records[userId] or NO_RECORD, call.recordOutcomes[profileNumber]
        local outcome = byValue and byValue[value]
        if outcome == nil then
          local profile = call.profiles[profileNumber]
          if profile == nil then return redis.error_reply('ERR cap-sends: unknown profile ' .. profileNumber) end
          outcome = recordOutcome(profileNumber, profile, value, userId)
        end
        call.reply[#call.reply + 1] = outcome[1]
        local written = outcome[2]
        if written then
          if blob and #written <= BIG_RECORD_BYTES and byte(written, 1) < CHUNKED_HEADER and not call.inHash[userId]
            and userId > blob.lastEdit then
            if outcome[3] > range.retention then range.retention = outcome[3] end
            local k = #blob.editIds + 1
            blob.editIds[k], blob.editRecords[k], blob.lastEdit, blob.edited = userId, written, userId, true
          else
            storeRecord(hashIndex, userId, written, outcome[3])
          end
        end
      end
    end
    if failure then return failure end
  end

  return finishCall()
end

return capSends
