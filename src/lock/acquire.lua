-- acquire.lua: take a lock if it is free, in one atomic step (the lease and its expiry
-- are written together: no SETNX-then-EXPIRE window).
-- KEYS[1]  lock hash {token, owner, fencing, expires_at, request_id[, waited]}
-- KEYS[2]  fence: the last fencing token of this name (outlives the lease)
-- ARGV[1]  token (random, made by the server)
-- ARGV[2]  owner
-- ARGV[3]  ttl in ms
-- ARGV[4]  request_id ('' for none)
-- ARGV[5]  '1' if the caller will wait when the lock is held (marks the lease so that
--          its release publishes a wake-up), else '0'
-- Clock: Redis TIME. fencing = max(last + 1, TIME in µs): strictly increasing even if
-- a crash lost the fence's last second of writes, as long as the Redis clock does not
-- run backwards.
-- Returns {1, token, fencing, expires_at_ms} acquired (or the same lease again for a
-- retried owner + request_id), {0, owner, fencing, expires_at_ms} held by another.
local held = redis.call('HMGET', KEYS[1], 'token', 'owner', 'fencing', 'expires_at', 'request_id')
if held[1] then
  if ARGV[4] ~= '' and held[2] == ARGV[2] and held[5] == ARGV[4] then
    return {1, held[1], held[3], held[4]}
  end
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[1], 'waited', '1')
  end
  return {0, held[2], held[3], held[4]}
end
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local fencing = string.format('%.0f', math.max(last + 1, now_us))
local ttl = tonumber(ARGV[3])
local expires_at = string.format('%.0f', math.floor(now_us / 1000) + ttl)
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2], 'fencing', fencing,
  'expires_at', expires_at, 'request_id', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], fencing, 'PX', ttl + 60000)
return {1, ARGV[1], fencing, expires_at}
