-- luacheck (Debian's lua-check) over the chunks Redis runs, each as one text: test/unit/lua-chunks.test.ts
-- joins them and names each by its entry file (a part alone reads the locals of the parts before it).
-- Redis runs Lua 5.1 with these libraries loaded; KEYS and ARGV are an EVAL script's globals.
std = "lua51"
read_globals = { "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct" }
-- most lines fit the TypeScript's 120 columns; a few lines of code run to 130, and comments are prose
max_code_line_length = 130
max_string_line_length = 130
max_comment_line_length = 160

files["lua/cap-sends"] = {
  ignore = {
    -- the call's `at` is the send time; parseTail(), sparseRange(), hasPage() and runSparseCall() name a
    -- position `at` and read no send time
    "431/at",
    -- sweepIdentities()'s `floor` is the identity table's "floor" field and readBlock()'s `format` a block's
    -- format number: neither function calls floor() or format()
    "431/floor",
    "431/format",
    -- runRecordPage() takes the call's records as `records`; runBlockPage()'s `records` are its page's, by
    -- position, which is all it reads
    "431/records",
    -- capSends() answers a refusal or failure where it finds one: each `refused` and `failure` is read in
    -- the lines after it is set
    "421/refused",
    "421/failure",
    -- writeRange() walks a range's parts for their blobs
    "213/lowest",
  },
}
files["lua/quota-sync"] = {
  -- an empty branch holds the comment that says why nothing is done there
  ignore = { "542" },
}
files["lua/limit.lua"] = {
  -- a one-algorithm chunk holds every helper of limit-common.lua; its algorithm calls some of them (the
  -- limits chunk, every algorithm, calls each)
  ignore = { "211/floorOf", "211/ceilOf", "211/persist", "211/rewrite" },
}
