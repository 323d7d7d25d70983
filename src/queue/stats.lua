-- stats.lua: queue depths (expired leases are returned first, as Lease would).
-- KEYS[1..9] as in prelude.lua
-- No ARGV. Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (prelude.lua reclaim()); the store runs it again.
-- Returns {ready, delayed, in_flight, dead, oldest_ready_at (-1 none), next_due_at (-1 none),
-- dead letters ever}.
local now = now_ms()
if reclaim(now) then
  return again()
end
local ready = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local delayed = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local oldest, next_due = -1, -1
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) <= now then
  oldest = tonumber(first[2])
end
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if later[2] then
  next_due = tonumber(later[2])
end
local dead_letters = tonumber(redis.call('HGET', KEYS[9], 'dead') or '0')
return {ready, delayed, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]), oldest, next_due,
  dead_letters}
