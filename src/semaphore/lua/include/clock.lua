-- clock.lua: Redis' clock, in µs (for fencing tokens) and ms (for leases). Numbers stay
-- Lua numbers: exact below 2^53, and µs since 1970 are about 2^51.
local function redis_now()
  local now = redis.call('TIME')
  local now_us = now[1] * 1000000 + now[2]
  return now_us, (now_us - now_us % 1000) / 1000
end
