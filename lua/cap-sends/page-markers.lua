-- Identity-table fields per page of a call up to which the table's markers are listed by HSCAN rather than
-- looked up by page (HSCAN costs ~100 instructions a field; a page's name made and looked up by HMGET ~5k);
-- a call of fewer pages (a single-user check) asks by page without asking the table's size (an HLEN).
local MARKER_SCAN_FIELDS_PER_PAGE, MARKER_SCAN_MIN_PAGES = 16, 4
-- A page's name (page: its number): its marker field in the identity table, and its block key after the prefix
-- (functions/core/shared/keys.ts, capPageName(), makes the same)
local function pageNameOf(page) return format('p:%d', page) end
-- The page numbers of a call whose users come by range (`sections`: its ranges' users' ID bytes, 4 each,
-- ascending: the page in bytes 1-3), each page once.
local function pagesOfSections(sections)
  local numbers, last = {}, -1
  for _, ids in ipairs(sections) do
    for q = 1, #ids, 4 do
      local a, b, c = byte(ids, q, q + 2)
      local page = (a * 256 + b) * 256 + c
      if page ~= last then numbers[#numbers + 1], last = page, page end
    end
  end
  return numbers
end
-- The pages that have a block, as a set of page numbers, and this call's identity number (myNumber; with the
-- table's numbering state, takeIdentity(), when the table is listed: a sparse campaign's call gives one): a table
-- with few fields next to the call's pages (pageCount: at least how many it has) is listed by HSCAN MATCH p:*
-- (in C, its whole set of markers); another is asked by one HMGET of the call's pages' markers (the set holds
-- only those; pagesOfSections() states `sections`).
local function readMarkers(args, pageCount, sections)
  local marked, fields = {}, pageCount >= MARKER_SCAN_MIN_PAGES and redis.call('HLEN', call.identityTableKey)
  if not fields or fields > MARKER_SCAN_FIELDS_PER_PAGE * pageCount then
    local numbers, names = sections and pagesOfSections(sections), {}
    if numbers then
      for p = 1, #numbers do names[p] = pageNameOf(numbers[p]) end
    else
      numbers = {}
      for p = 1, pageCount do
        local a, b, c = byte(args[FIRST_PAGE_ARG + p], 3, 5)
        numbers[p] = (a * 256 + b) * 256 + c
        names[p] = pageNameOf(numbers[p])
      end
    end
    local markers = redis.call('HMGET', call.identityTableKey, 'i:' .. call.identity, unpackList(names))
    for p = 1, #numbers do
      if markers[p + 1] then marked[numbers[p]] = true end
    end
    call.myNumber = tonumber(markers[1] or nil) or false
    return marked
  end
  takeIdentity(redis.call('HMGET', call.identityTableKey, 'i:' .. call.identity, unpackList(IDENTITY_STATE_FIELDS)))
  local cursor = '0'
  while fields > 0 do
    local scan = redis.call('HSCAN', call.identityTableKey, cursor, 'MATCH', 'p:*', 'COUNT', fields)
    local found = scan[2]
    for i = 1, #found, 2 do
      local number = tonumber(sub(found[i], 3))
      if number then marked[number] = true end
    end
    cursor = scan[1]
    if cursor == '0' then break end
  end
  return marked
end
