-- now_ms.lua: Redis' clock (TIME) in Unix ms: the one clock of every queue script.
-- Redis' clock in Unix ms, and in Unix µs: the µs for a reply the server sets a timer
-- by (counted from the ms alone, a timer fires up to 1 ms late).
-- The run's instant in Unix µs, set by the first look at the clock: what DEAD,
-- COMPLETED and CANCELLED tasks are scored by (when they ended), one instant per run,
-- so two runs' ends never tie and one run's tie in enqueue order (by member).
local script_us = 0

local function now_ms_us()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  script_us = s * 1000000 + us
  return s * 1000 + math.floor(us / 1000), script_us
end

local function now_ms()
  local ms = now_ms_us()
  return ms
end
