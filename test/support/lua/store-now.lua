-- The test build's store clock (test/support/quota-test-clock.ts joins it in place of
-- lua/quota-sync/store-now.lua): the slot group's test clock key (slotGroupTestClockKey in
-- sdk/src/protocol/keys.ts: the configuration key with ":clock" for ":cfg", so in the group's own hash slot)
-- holds the store's time in ms when a test sets it; without it, TIME as in production.
local function storeNow(cfgKey)
  local set = tonumber(rcall('GET', string.sub(cfgKey, 1, -4) .. 'clock'))
  if set then return set end
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end
