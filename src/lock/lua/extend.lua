-- extend.lua: reset the lease to ttl from now, only for the current holder; also a
-- Hold stream's renewal, and its re-attach by token.
-- KEYS[1]  lock
-- KEYS[2]  index: the held locks (acquire.lua); the name's entry follows the lease
-- ARGV[1]  token
-- ARGV[2]  ttl in ms
-- ARGV[3]  the attach generation the caller holds ('' for any: the unary Extend)
-- ARGV[4]  '1' to take the lease over (a Hold stream re-attaching by token): the
--          generation goes up by one, so the stream that held it before (its
--          connection cut but not yet noticed) can no longer renew or release it
-- ARGV[5]  the lock's name (its index member)
-- Clock: Redis TIME.
-- Returns {1, expires_at_ms, owner, fencing, generation} extended, {0} not held by this
-- token, {2} held by this token but taken over by a later Hold stream.
--- @include "lease"
--- @include "same_attach"
local lock, index = KEYS[1], KEYS[2]
local caller_token, ttl_ms, held_attach, take_over, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local value = redis.call('GET', lock)
if not value then
  return {0}
end
local token, waited, fencing, _, owner, request_id, attach = unpack_lease(value)
if token ~= caller_token then
  return {0}
end
if not same_attach(held_attach, attach) then
  return {2}
end
if take_over == '1' then
  attach = attach + 1
end
local now = redis.call('TIME')
local ttl = tonumber(ttl_ms)
local expires_at = now[1] * 1000 + (now[2] - now[2] % 1000) / 1000 + ttl
redis.call('SET', lock,
  pack_lease(token, waited, fencing, expires_at, owner, request_id, attach), 'PX', ttl)
redis.call('ZADD', index, expires_at, name)
return {1, expires_at, owner, fencing, attach}
