-- release.lua: give back a holder's permits, only for its token, and wake the front of
-- the line that fits now.
-- KEYS[1..4]  holders, line, leases, sem (acquire.lua)
-- ARGV[1]  token
-- ARGV[2]  the semaphore-wake channel
-- ARGV[3]  the attach generation the caller holds ('' for any: the unary Release)
-- Clock: Redis TIME (a lease that ended is not released: it is already gone).
-- Returns 1 released, 0 not held by this token (or taken over by a later Hold stream).
--- @include "clock"
--- @include "holder"
--- @include "lock/same_attach"
--- @include "prune"
--- @include "line"
local holders, line, leases, sem = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, channel, held_attach = ARGV[1], ARGV[2], ARGV[3]

local _, now = redis_now()
local changed = prune(sem, holders, line, leases, now)
local value = redis.call('HGET', sem, 'h:' .. token)
local released = 0
if value then
  local permits, _, _, owner, request_id, attach = unpack_holder(value)
  if same_attach(held_attach, attach) then
    drop_holder(sem, holders, token, permits, owner, request_id)
    released, changed = 1, true
  end
end
if changed then
  local state = redis.call('HMGET', sem, 'limit', 'in_use')
  wake_front(line, tonumber(state[2]) or 0, tonumber(state[1]) or 0, channel)
end
return released
