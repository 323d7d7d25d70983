-- now_ms.lua: Redis' clock (TIME) in Unix ms: the one clock of every queue script.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
