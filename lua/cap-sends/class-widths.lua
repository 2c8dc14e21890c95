-- Format 6 stores the users' class numbers at the narrowest width the block's class count fits: 2 bytes,
-- 1 byte (up to 255), or 4, 2 or 1 bits a user (up to 15, 3, 1; the first user in a byte's high bits). The
-- width follows from the string's length: 512, 256, 128, 64 or 32 bytes (2: one class for every user, as in
-- format 5). A call works on 2 bytes a user; these convert with string.gsub (in C), over tables of the 256
-- bytes' expansions made on a packed width's first use and kept by the library (constants of the format).
-- One table at the top level (the chunk's locals budget): storedClasses.read() and storedClasses.packed().
local storedClasses = {}
do
  local COMPACT_FORMAT = 6
  local PACKED_BITS = { [128] = 4, [64] = 2, [32] = 1 }
  -- a packed byte's users as 2 bytes each: what string.gsub matches when packing (literals: the library's top
  -- level runs without `string`)
  local PACKED_MATCH = { [4] = '....', [2] = '........', [1] = '................' }
  -- per width: each byte's users as 2 bytes each, and the inverse
  local unpackOf, packOf = {}, {}
  local function packTables(bits)
    local expand = unpackOf[bits]
    if expand == nil then
      expand = {}
      local pack, perByte, base = {}, 8 / bits, 2 ^ bits
      for value = 0, 255 do
        local wide, rest = {}, value
        for k = perByte, 1, -1 do
          local number = rest % base
          rest = (rest - number) / base
          wide[k] = '\0' .. char(number)
        end
        local users = concat(wide)
        expand[char(value)], pack[users] = users, char(value)
      end
      unpackOf[bits], packOf[bits] = expand, pack
    end
    return expand, packOf[bits]
  end

  -- A stored block's class bytes as 2 bytes a user (or the uniform page's 2); nil for a format this script does not
  -- read, or a length no width has.
  function storedClasses.read(userClasses, format)
    if format ~= FORMAT and format ~= 4 and format ~= COMPACT_FORMAT then return nil end
    local length = #userClasses
    if length == 2 or length == 2 * PAGE_USERS then return userClasses end
    if format ~= COMPACT_FORMAT then return nil end
    if length == PAGE_USERS then return (string.gsub(userClasses, '.', '\0%0')) end
    local bits = PACKED_BITS[length]
    if bits == nil then return nil end
    return (string.gsub(userClasses, '.', (packTables(bits))))
  end

  -- The page's class bytes (2 a user) at the narrowest width `classCount` fits (a class number indexes the
  -- block's classes, so none is larger), and the format that stores them: format 5 when that is 2 bytes.
  local function narrowClasses(userClasses, classCount)
    if classCount > 255 then return userClasses, FORMAT end
    if classCount > 15 then return (string.gsub(userClasses, '.(.)', '%1')), COMPACT_FORMAT end
    local bits = classCount > 3 and 4 or (classCount > 1 and 2 or 1)
    local _, pack = packTables(bits)
    -- a packed byte from each of its users' 2 bytes: PAGE_USERS * bits / 8 matches
    local packed = string.gsub(userClasses, PACKED_MATCH[bits], pack)
    if #packed ~= PAGE_USERS * bits / 8 then return userClasses, FORMAT end
    return packed, COMPACT_FORMAT
  end

  -- A block's stored value: format 5, or with "+compact" format 6 when its class numbers fit a narrower width
  -- (`uniform`: the 2 bytes every user's class has, stored alone in either format).
  function storedClasses.packed(block, userClasses, uniform)
    local blockFormat = FORMAT
    if uniform then
      userClasses = uniform
    elseif call.compactClasses then
      userClasses, blockFormat = narrowClasses(userClasses, #block.classes)
    end
    return cmsgpack.pack(blockFormat, block.width, block.compactAt, block.classLimit, block.identities, block.times,
      block.eventIdentities, block.classes, userClasses)
  end
end
