-- stats.lua: queue depths. Not read only: expired leases are returned first, as Lease
-- would, so the depths agree with what a Lease would find. Like peek.lua, it does not
-- wait for replicas (@no-replica-wait).
-- KEYS: the queue's nine keys (include/keys.lua)
-- No ARGV. Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns {ready, delayed, in_flight, dead, oldest_ready_at (-1 none), next_due_at (-1 none),
-- dead letters ever}.
--- @no-replica-wait
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
local now = now_ms()
if reclaim(now) then
  return again()
end
local ready = redis.call('ZCOUNT', pending, '-inf', now)
local delayed = redis.call('ZCOUNT', pending, '(' .. now, '+inf')
local oldest, next_due = -1, -1
local first = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) <= now then
  oldest = tonumber(first[2])
end
local later = redis.call('ZRANGEBYSCORE', pending, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if later[2] then
  next_due = tonumber(later[2])
end
local dead_letters = tonumber(redis.call('HGET', counters, 'dead') or '0')
return {ready, delayed, redis.call('ZCARD', inflight), redis.call('ZCARD', dead), oldest,
  next_due, dead_letters}
