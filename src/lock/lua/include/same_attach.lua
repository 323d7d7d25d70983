-- same_attach.lua: whether a caller holding attach generation `held` ('' for any: the
-- unary calls) may renew or release a lease at generation `attach`.
local function same_attach(held, attach)
  return held == '' or tonumber(held) == attach
end
