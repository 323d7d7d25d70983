-- extend.lua: reset a holder's lease to ttl from now, only for its token; also a Hold
-- stream's renewal and its re-attach by token (as src/lock/lua/extend.lua).
-- KEYS[1..4]  holders, line, leases, sem (acquire.lua)
-- ARGV[1]  token
-- ARGV[2]  ttl in ms
-- ARGV[3]  the attach generation the caller holds ('' for any: the unary Extend)
-- ARGV[4]  '1' to take the lease over (a Hold stream re-attaching by token)
-- ARGV[5]  the semaphore-wake channel (the prune may free permits)
-- Clock: Redis TIME.
-- Returns {1, expires_at_ms, owner, fencing, generation} extended, {0} not held by this
-- token, {2} held by this token but taken over by a later Hold stream.
--- @include "clock"
--- @include "holder"
--- @include "lock/same_attach"
--- @include "keep_until"
--- @include "prune"
--- @include "line"
local holders, line, leases, sem = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, held_attach, take_over, channel =
  ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]

local _, now = redis_now()
if prune(sem, holders, line, leases, now) then
  local state = redis.call('HMGET', sem, 'limit', 'in_use')
  wake_front(line, tonumber(state[2]) or 0, tonumber(state[1]) or 0, channel)
end
local value = redis.call('HGET', sem, 'h:' .. token)
if not value then
  return {0}
end
local permits, fencing, _, owner, request_id, attach = unpack_holder(value)
if not same_attach(held_attach, attach) then
  return {2}
end
if take_over == '1' then
  attach = attach + 1
end
local expires_at = now + ttl
redis.call('HSET', sem, 'h:' .. token,
  pack_holder(permits, fencing, expires_at, owner, request_id, attach))
redis.call('ZADD', holders, expires_at, token)
keep_until(sem, expires_at + 60000)
keep_until(holders, expires_at + 60000)
return {1, expires_at, owner, fencing, attach}
