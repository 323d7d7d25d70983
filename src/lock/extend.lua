-- extend.lua: reset the lease to ttl from now, only for the current holder.
-- KEYS[1]  lock
-- ARGV[1]  token
-- ARGV[2]  ttl in ms
-- Clock: Redis TIME.
-- Returns {1, expires_at_ms, owner} extended, {0} not held by this token.
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local token, waited, fencing, _, owner, request_id = unpack_lease(value)
if token ~= ARGV[1] then
  return {0}
end
local now = redis.call('TIME')
local ttl = tonumber(ARGV[2])
local expires_at = now[1] * 1000 + (now[2] - now[2] % 1000) / 1000 + ttl
redis.call('SET', KEYS[1], pack_lease(token, waited, fencing, expires_at, owner, request_id),
  'PX', ttl)
return {1, expires_at, owner}
