-- The reply: codes as numbers in `reply`, moved into `replyParts` as a string before a page adds a string of codes.
local function flushReply()
  -- string.char takes the codes in slices that stay within Lua's stack limit
  for first = 1, #call.reply, 4000 do
    call.replyParts[#call.replyParts + 1] = char(unpackList(call.reply, first, math.min(first + 3999, #call.reply)))
  end
  call.reply = {}
end
local function appendReply(codes)
  if #call.reply > 0 then flushReply() end
  call.replyParts[#call.replyParts + 1] = codes
end
