--[[ cap-sends.lua: exact multi-window sliding-log frequency caps for many users in one call.

Each key holds the send logs of one block of 128 consecutive user IDs; every key of a call shares one hash
tag (the users' slot group), so one call decides every user of the group at once.

KEYS[k]    the group's block keys, always all 8 (a fixed key count lets the client route the call by its
           first key); a block whose user argument is empty is not read
ARGV[1]    now: ms since the epoch; a cap counts the sends in (now - window, now]
ARGV[2]    mode: "count" records allowed sends; "peek" decides the same way and writes nothing
ARGV[3]    horizon, ms: entries at or before now - horizon are dropped when their record is rewritten; a
           written key expires `horizon` after its newest entry
ARGV[4]    identity: "<channel>:<campaign ID>"; the channel name has no ":". An empty campaign ID means no
           identity (every send counts). A send whose identity is already in the user's log is a duplicate.
ARGV[5]    caps by profile: profiles separated by "|", caps by ",", a cap is "windowMs:max:scope" with scope
           1 = counts every channel ("*"), 0 = counts the identity's channel only. Profile p is the p-th.
ARGV[5+k]  users of KEYS[k] (may be empty): 2 bytes each, offset in block (0..127) and profile number (255: count without
           checking caps, for exempt sends that count), ascending by offset, no repeats
Reply      one byte per user in argument order: 0 allowed (counted), 1 duplicate (counted before, nothing
           changes), 2 exempt (counted without checks), 3+i capped by cap i (0-based) of its profile

Block value (binary, big endian):
  1 byte   format (1)
  6 bytes  newest entry, ms
  2 bytes  identity count C; then C times: 1 byte length L, L bytes identity
  records ascending by offset: 1 byte offset, 2 bytes entry count N, N times: 6 bytes time ms, 2 bytes identity
  number (1..C)
]]

local now = tonumber(ARGV[1])
local peek = ARGV[2] == 'peek'
local horizon = tonumber(ARGV[3])
local identity = ARGV[4]
local channel = string.match(identity, '^[^:]*')
local anonymous = #identity == #channel + 1
local cutoff = now - horizon
local byte, sub, char = string.byte, string.sub, string.char

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

local function u16(n)
  return char(math.floor(n / 256), n % 256)
end

local function u48(n)
  local f = n % 256; n = (n - f) / 256
  local e = n % 256; n = (n - e) / 256
  local d = n % 256; n = (n - d) / 256
  local c = n % 256; n = (n - c) / 256
  local b = n % 256; n = (n - b) / 256
  return char(n, b, c, d, e, f)
end

local nowBytes = u48(now)
local replyByte = {}
for d = 0, 255 do replyByte[d] = char(d) end
local reply = {}
local counts = {}

for k = 1, #KEYS do
  local key, users = KEYS[k], ARGV[5 + k]
  if #users > 0 then
  local blob = redis.call('GET', key)
  local ids, idChannel, newest, p, tableEnd = {}, {}, now, 1, 10
  if blob then
    local a, b, c, d, e, f = byte(blob, 2, 7)
    newest = math.max(now, ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f)
    local hi, lo = byte(blob, 8, 9)
    p = 10
    for i = 1, hi * 256 + lo do
      local len = byte(blob, p)
      ids[i] = sub(blob, p + 1, p + len)
      idChannel[i] = string.match(ids[i], '^[^:]*')
      p = p + 1 + len
    end
    tableEnd = p
  else
    blob = ''
  end
  local mine
  for i = 1, #ids do
    if ids[i] == identity then mine = i break end
  end
  -- A new identity means a full rewrite: every record is pruned and renumbered, and identities no entry
  -- refers to any more are dropped. That happens once per campaign and block, so the table stays small.
  local full = mine == nil and not peek
  if full then
    ids[#ids + 1] = identity
    idChannel[#ids] = channel
    mine = #ids
  end

  local size, nusers, u = #blob, #users, 1
  local records = {}   -- rewritten block body: raw record strings, or {offset, times..., ids...} when full
  local written = false
  while p <= size or u <= nusers do
    local ro = p <= size and byte(blob, p) or 256
    local uo = u <= nusers and byte(users, u) or 256
    local n, first = 0, p + 3
    if ro <= uo then
      local hi, lo = byte(blob, p + 1, p + 2)
      n = hi * 256 + lo
      p = p + 3 + 8 * n
    end
    if ro < uo then
      -- a record no user of this call touches: copy it, or prune it when renumbering
      if full then
        local rec = { ro }
        for q = first, p - 1, 8 do
          local a, b, c, d, e, f, ih, il = byte(blob, q, q + 7)
          if ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f > cutoff then
            rec[#rec + 1] = sub(blob, q, q + 5)
            rec[#rec + 1] = ih * 256 + il
          end
        end
        records[#records + 1] = rec
      else
        records[#records + 1] = sub(blob, first - 3, p - 1)
      end
    else
      local profile = byte(users, u + 1)
      u = u + 2
      local forced = profile == 255
      local lo, mx, all = capLo[profile], capMax[profile], capAll[profile]
      if not forced and lo == nil then
        return redis.error_reply('ERR cap-sends: unknown profile ' .. profile)
      end
      local ncaps = forced and 0 or #lo
      for i = 1, ncaps do counts[i] = 0 end
      local duplicate = false
      local rec = { uo }
      for q = first, first + 8 * n - 1, 8 do
        local a, b, c, d, e, f, ih, il = byte(blob, q, q + 7)
        local t = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
        if t > cutoff then
          local id = ih * 256 + il
          if full then
            rec[#rec + 1] = sub(blob, q, q + 5)
            rec[#rec + 1] = id
          else
            rec[#rec + 1] = sub(blob, q, q + 7)
          end
          if id == mine and not anonymous then duplicate = true end
          if t <= now then
            local own = idChannel[id] == channel
            for i = 1, ncaps do
              if t > lo[i] and (own or all[i]) then counts[i] = counts[i] + 1 end
            end
          end
        end
      end
      local decision = 0
      if duplicate then
        decision = 1
      elseif forced then
        decision = 2
      else
        for i = 1, ncaps do
          if counts[i] >= mx[i] then decision = 2 + i break end
        end
      end
      if (decision == 0 or decision == 2) and not peek then
        if full then
          rec[#rec + 1] = nowBytes
          rec[#rec + 1] = mine
        else
          rec[#rec + 1] = nowBytes .. u16(mine)
        end
        written = true
      end
      reply[#reply + 1] = replyByte[decision]
      if full then
        records[#records + 1] = rec
      elseif #rec > 1 then
        records[#records + 1] = char(uo) .. u16(#rec - 1) .. table.concat(rec, '', 2)
      end
    end
  end

  if written then
    local header
    if full then
      -- renumber the identities still referred to, in order of first use
      local renumber, kept = {}, {}
      for r = 1, #records do
        local rec = records[r]
        local pieces = { char(rec[1]), u16((#rec - 1) / 2) }
        for i = 2, #rec, 2 do
          local old = rec[i + 1]
          local new = renumber[old]
          if new == nil then
            kept[#kept + 1] = ids[old]
            new = #kept
            renumber[old] = new
          end
          pieces[#pieces + 1] = rec[i]
          pieces[#pieces + 1] = u16(new)
        end
        records[r] = #rec > 1 and table.concat(pieces) or ''
      end
      local table_ = { u16(#kept) }
      for i = 1, #kept do table_[#table_ + 1] = char(#kept[i]) .. kept[i] end
      header = table.concat(table_)
    else
      header = sub(blob, 8, tableEnd - 1)
    end
    redis.call('SET', key, '\1' .. u48(newest) .. header .. table.concat(records), 'PX', newest + horizon - now)
  end
  end
end

return table.concat(reply)
