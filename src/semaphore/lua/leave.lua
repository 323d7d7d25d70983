-- leave.lua: a waiter that gives up leaves the line at once; if it held back the ones
-- behind it, the front that fits now is woken.
-- KEYS[1..4]  holders, line, leases, sem (acquire.lua)
-- ARGV[1]  the line entry, `<ticket>:<permits>`
-- ARGV[2]  the semaphore-wake channel
-- No clock. Returns 1 left, 0 was not in the line.
--- @include "line"
local line, leases, sem = KEYS[2], KEYS[3], KEYS[4]
local member, channel = ARGV[1], ARGV[2]

local rank = redis.call('ZRANK', line, member)
if not rank then
  return 0
end
redis.call('ZREM', line, member)
redis.call('ZREM', leases, member)
if rank < WALK then
  local state = redis.call('HMGET', sem, 'limit', 'in_use')
  wake_front(line, tonumber(state[2]) or 0, tonumber(state[1]) or 0, channel)
end
return 1
