-- extend.lua: reset the lease to ttl from now, only for the current holder; also a
-- Hold stream's renewal, and its re-attach by token.
-- KEYS[1]  lock
-- ARGV[1]  token
-- ARGV[2]  ttl in ms
-- ARGV[3]  the attach generation the caller holds ('' for any: the unary Extend)
-- ARGV[4]  '1' to take the lease over (a Hold stream re-attaching by token): the
--          generation goes up by one, so the stream that held it before (its
--          connection cut but not yet noticed) can no longer renew or release it
-- Clock: Redis TIME.
-- Returns {1, expires_at_ms, owner, fencing, generation} extended, {0} not held by this
-- token, {2} held by this token but taken over by a later Hold stream.
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local token, waited, fencing, _, owner, request_id, attach = unpack_lease(value)
if token ~= ARGV[1] then
  return {0}
end
if not same_attach(ARGV[3], attach) then
  return {2}
end
if ARGV[4] == '1' then
  attach = attach + 1
end
local now = redis.call('TIME')
local ttl = tonumber(ARGV[2])
local expires_at = now[1] * 1000 + (now[2] - now[2] % 1000) / 1000 + ttl
redis.call('SET', KEYS[1],
  pack_lease(token, waited, fencing, expires_at, owner, request_id, attach), 'PX', ttl)
return {1, expires_at, owner, fencing, attach}
