-- watch.lua: a Watch stream's look at a lock: marks the name watched (so that a win
-- publishes lock-changed, acquire.lua) and the current lease (so that its end
-- publishes lock-released, include/free_lock.lua), and answers the lease.
-- KEYS[1]  lock
-- KEYS[2]  watched: the mark, kept while the stream lives (PX, refreshed by it)
-- ARGV[1]  how long the mark lasts, ms
-- No clock. Its writes are marks, not state a client was told is stored: it does not
-- wait for replicas (@no-replica-wait).
-- Returns {} when the lock is free, else {owner, fencing, expires_at_ms}.
--- @no-replica-wait
--- @include "lease"
local lock, watched = KEYS[1], KEYS[2]
local mark_ms = ARGV[1]

redis.call('SET', watched, '1', 'PX', mark_ms)
local value = redis.call('GET', lock)
if not value then
  return {}
end
local token, waited, fencing, expires_at, owner, request_id, attach = unpack_lease(value)
if waited < WATCHER then
  redis.call('SET', lock,
    pack_lease(token, waited + WATCHER, fencing, expires_at, owner, request_id, attach),
    'KEEPTTL')
end
return {owner, fencing, expires_at}
