-- Room a cap keeps for higher priorities. A call's profile carries the maxima the call's priority sees (each
-- cap's max less what it reserves for priorities above the call's) and, when some reserve applies, the caps'
-- own maxima (ARGV[7]'s fourth array, as profile.full). A send refused under the first and allowed under the
-- second is displaced by the reserve (its own code), not capped: the caps would have let a higher priority in.
-- 3 + 32 + i: displaced by cap i (a profile has at most 32 caps, MAX_CAPS_PER_CHANNEL in policy.ts)
local REPLY_FIRST_DISPLACED = REPLY_FIRST_CAP + 32
-- The same profile at the caps' own maxima, or nil when the call's priority sees every max whole.
local function fullProfileOf(profile, fullMaxima)
  if fullMaxima == nil then return nil end
  local full, least = {}, math.huge
  for field, value in pairs(profile) do full[field] = value end
  for cap = 1, #fullMaxima do
    if fullMaxima[cap] < least then least = fullMaxima[cap] end
  end
  full.maxima, full.least = fullMaxima, least
  return full
end
-- `code` refused the send under the call's maxima (a cap's code); `fullCode` is the decision under the caps'
-- own maxima: capped there too (that cap's code), or displaced by the cap that refused it.
local function displacedOr(code, fullCode)
  if fullCode == 0 then return code - REPLY_FIRST_CAP + REPLY_FIRST_DISPLACED end
  return fullCode
end
