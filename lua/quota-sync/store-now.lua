-- The store's clock (ms): the one read of it in this script, `TIME` on the slot group's node (a Redis
-- Function reads the node's clock; Valkey 8 answers the script's start from every call, so one read is all a
-- call has). `cfgKey` is the slot group's configuration key (KEYS[1]); the production part does not read it.
local function storeNow(cfgKey) -- luacheck: ignore cfgKey
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end
