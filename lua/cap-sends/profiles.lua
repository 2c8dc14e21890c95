-- Profiles present in this call: caps, retention cutoff and retention (per call, by readProfiles()).

-- The caps come packed by cmsgpack (in C): parsing 64 profiles × 32 caps from text cost 2 ms of Lua string
-- matching, unpacking them costs a seventh. Returns an error reply, or nothing.
local function readProfiles(packedCaps, packedRetentions)
  call.profiles, call.profileCount = {}, 0
  local retentions, windowRetentions = {}, {}
  -- (each number converted once: tonumber of a string is strtod, ~1k instructions)
  for retention, windowRetention in string.gmatch(packedRetentions, '(%d+):?(%d*)') do
    local k, value = #retentions + 1, tonumber(retention)
    retentions[k], windowRetentions[k] = value, windowRetention == '' and value or tonumber(windowRetention)
  end
  local specs = cmsgpack.unpack(packedCaps)
  call.profileCount = #specs
  for index = 0, #specs - 1 do
    local spec = specs[index + 1]
    -- [k, periods]: the caps of the call's earlier profile k with periods of its own (calendar caps of another
    -- zone), or the caps themselves
    local shared = type(spec[1]) == 'number' and call.profiles[spec[1]]
    if type(spec[1]) == 'number' and not (shared and spec[1] < index) then
      return redis.error_reply('ERR cap-sends: profile ' .. index .. ' shares the caps of no earlier profile')
    end
    local windows, maxima, scopes = spec[1], spec[2], spec[3]
    -- least: the smallest max (a user with fewer sends than that is under every cap); longest: the longest window
    local everyChannel, least, longest, fullMaxima, periods
    if shared then
      windows, maxima, everyChannel, least, longest = shared.windows, shared.maxima, shared.everyChannel, shared.least,
        shared.longest
      fullMaxima, periods = shared.full and shared.full.maxima, spec[2]
    else
      everyChannel, least, longest, fullMaxima, periods = {}, math.huge, 0, spec[4], spec[5]
      for cap = 1, #maxima do
        everyChannel[cap] = scopes[cap] == 1
        if maxima[cap] < least then least = maxima[cap] end
        if windows[cap] > longest then longest = windows[cap] end
      end
    end
    local retention, windowRetention = retentions[index + 1], windowRetentions[index + 1]
    if retention == nil then return redis.error_reply('ERR cap-sends: no retention for profile ' .. index) end
    local profile = {
      windows = windows, maxima = maxima, everyChannel = everyChannel, least = least, longest = longest,
      retention = retention, cutoff = call.now - retention, windowCutoff = call.now - math.min(windowRetention, retention),
      -- in the constructor: a field added after it grows the table's hash part
      periods = periodsOf(periods, #maxima),
    }
    profile.full = fullProfileOf(profile, fullMaxima)
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
