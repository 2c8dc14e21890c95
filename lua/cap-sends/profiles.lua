-- Profiles present in this call: caps, retention cutoff and retention (per call, by readProfiles()).

-- The caps come packed by cmsgpack (in C): parsing 64 profiles × 32 caps from text cost 2 ms of Lua string
-- matching, unpacking them costs a seventh. Returns an error reply, or nothing.
local function readProfiles(packedCaps, packedRetentions)
  call.profiles, call.profileCount = {}, 0
  local retentions, windowRetentions = {}, {}
  for retention, windowRetention in string.gmatch(packedRetentions, '(%d+):?(%d*)') do
    retentions[#retentions + 1] = tonumber(retention)
    windowRetentions[#retentions] = tonumber(windowRetention) or tonumber(retention)
  end
  local specs = cmsgpack.unpack(packedCaps)
  call.profileCount = #specs
  for index = 0, #specs - 1 do
    local spec = specs[index + 1]
    local windows, maxima, scopes = spec[1], spec[2], spec[3]
    -- least: the smallest max (a user with fewer sends than that is under every cap); longest: the longest window
    local everyChannel, least, longest = {}, math.huge, 0
    for cap = 1, #maxima do
      everyChannel[cap] = scopes[cap] == 1
      if maxima[cap] < least then least = maxima[cap] end
      if windows[cap] > longest then longest = windows[cap] end
    end
    local retention, windowRetention = retentions[index + 1], windowRetentions[index + 1]
    if retention == nil then return redis.error_reply('ERR cap-sends: no retention for profile ' .. index) end
    local profile = {
      windows = windows, maxima = maxima, everyChannel = everyChannel, least = least, longest = longest,
      retention = retention, cutoff = call.now - retention, windowCutoff = call.now - math.min(windowRetention, retention),
    }
    profile.periods = periodsOf(spec[5], #maxima)
    profile.full = fullProfileOf(profile, spec[4])
    call.profiles[index] = profile
  end
end

-- whether an identity's send is on the call's channel, worked out once per identity per call
local function isOnCallChannel(someIdentity)
  local known = call.onCallChannel[someIdentity]
  if known == nil then
    known = string.match(someIdentity, '^[^:]*') == call.channel
    call.onCallChannel[someIdentity] = known
  end
  return known
end
