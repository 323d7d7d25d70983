-- unlist.lua: takes an empty queue off its tenant's queue registry, unless a server
-- named it there again since `cutoff` (an Enqueue or a config names its queue there
-- first, at most once a minute per server, so a queue in use is never taken off).
-- KEYS[1] the tenant's queue registry (zset of names, score 0), KEYS[2] when a server
-- last named each (hash: name -> Unix ms)
-- ARGV[1] the queue, ARGV[2] cutoff (Unix ms)
-- Returns 1 when it took the queue off.
local registry, named = KEYS[1], KEYS[2]
local queue, cutoff = ARGV[1], tonumber(ARGV[2])

local at = tonumber(redis.call('HGET', named, queue) or '0')
if at < cutoff then
  redis.call('ZREM', registry, queue)
  redis.call('HDEL', named, queue)
  return 1
end
return 0
