-- The reply: codes as numbers in `reply`, moved into `replyParts` as a string before a page adds a string of codes.
local reply, replyParts, windowLines -- per call
local function flushReply()
  -- string.char takes the codes in slices that stay within Lua's stack limit
  for first = 1, #reply, 4000 do
    replyParts[#replyParts + 1] = char(unpackList(reply, first, math.min(first + 3999, #reply)))
  end
  reply = {}
end
local function appendReply(codes)
  if #reply > 0 then flushReply() end
  replyParts[#replyParts + 1] = codes
end
