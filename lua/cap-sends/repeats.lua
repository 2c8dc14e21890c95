-- `text` repeated `count` times, once per call (the pages of a dense call repeat the same reply code and class
-- bytes): by string.rep up to REP_BYTES, by doubling beyond (string.rep copies a byte at a time: ~30
-- instructions a byte; each doubling makes a Lua string, ~1.5k: 20 users' 3 class bytes cost 1.5k by
-- string.rep and 8k by doubling, a page's 512 class bytes 17k and 28k)
local REP_BYTES = 1024
local function repeated(text, count)
  local byText = call.repeatedOf[count]
  if byText == nil then
    byText = {}
    call.repeatedOf[count] = byText
  end
  local result = byText[text]
  if result then return result end
  if #text * count <= REP_BYTES then
    result = string.rep(text, count)
    byText[text] = result
    return result
  end
  local part, left = text, count
  result = ''
  while left > 0 do
    if left % 2 == 1 then result = result .. part end
    left = floor(left / 2)
    if left > 0 then part = part .. part end
  end
  byText[text] = result
  return result
end

-- A table whose array part holds `count` falses, made in one allocation: a map keyed by class number filled
-- key by key is rehashed at every power of two, and a key outside its array part costs a hash node (~250
-- instructions a new key in Redis' Lua, against ~70 to overwrite one)
local FALSES = {}
for i = 1, 1024 do FALSES[i] = false end
local function falses(count)
  if count > #FALSES then return {} end
  return { unpackList(FALSES, 1, count) }
end
