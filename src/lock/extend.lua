-- extend.lua: reset the lease to ttl from now, only for the current holder.
-- KEYS[1]  lock hash
-- ARGV[1]  token
-- ARGV[2]  ttl in ms
-- Clock: Redis TIME.
-- Returns {1, expires_at_ms, owner} extended, {0} not held by this token.
local held = redis.call('HMGET', KEYS[1], 'token', 'owner')
if held[1] ~= ARGV[1] then
  return {0}
end
local now = redis.call('TIME')
local ttl = tonumber(ARGV[2])
local expires_at = string.format('%.0f', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + ttl)
redis.call('HSET', KEYS[1], 'expires_at', expires_at)
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, expires_at, held[2]}
