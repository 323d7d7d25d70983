-- index_owner.lua: remember that owner holds a lock until expires_at (for ReleaseAll).
-- KEYS[1]  the owner's sorted set of lock names, score = lease end (Unix ms)
-- ARGV[1]  lock name
-- ARGV[2]  expires_at in ms
-- Clock: Redis TIME, to drop entries whose lease ended; the set expires with its
-- latest lease, so owners that never call ReleaseAll leave nothing behind.
-- Returns the number of names indexed.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], 'GT', ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now_ms)
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if latest[2] then
  redis.call('PEXPIREAT', KEYS[1], latest[2])
end
return redis.call('ZCARD', KEYS[1])
