-- Fixed-width event numbers inside a class string. string.byte and string.char do the bytes in C, in
-- slices that stay within Lua's C stack limit (a class can hold thousands of sends).
local SLICE = 3000
local function bytesOf(text)
  local length = #text
  if length <= SLICE then return { byte(text, 1, length) } end
  local bytes = {}
  for first = 1, length, SLICE do
    local slice = { byte(text, first, math.min(first + SLICE - 1, length)) }
    local base = first - 1
    for i = 1, #slice do bytes[base + i] = slice[i] end
  end
  return bytes
end
local function charsOf(bytes)
  local count = #bytes
  if count <= SLICE then return char(unpackList(bytes, 1, count)) end
  local parts = {}
  for first = 1, count, SLICE do parts[#parts + 1] = char(unpackList(bytes, first, math.min(first + SLICE - 1, count))) end
  return concat(parts)
end
local function encodeNumber(number, width)
  if width == 1 then return char(number) end
  if width == 2 then return char(floor(number / 256), number % 256) end
  return char(floor(number / 65536), floor(number / 256) % 256, number % 256)
end
local function eventsOfClass(history, width)
  local bytes = bytesOf(history)
  if width == 1 then return bytes end
  local numbers = {}
  if width == 2 then
    for q = 1, #bytes, 2 do numbers[#numbers + 1] = bytes[q] * 256 + bytes[q + 1] end
  else
    for q = 1, #bytes, 3 do numbers[#numbers + 1] = (bytes[q] * 256 + bytes[q + 1]) * 256 + bytes[q + 2] end
  end
  return numbers
end
local function encodeClass(numbers, width)
  if width == 1 then return charsOf(numbers) end
  local bytes, k = {}, 0
  for i = 1, #numbers do
    local number = numbers[i]
    if width == 3 then
      bytes[k + 1] = floor(number / 65536)
      k = k + 1
    end
    bytes[k + 1], bytes[k + 2] = floor(number / 256) % 256, number % 256
    k = k + 2
  end
  return charsOf(bytes)
end
