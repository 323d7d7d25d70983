-- release_owner.lua: free a lock if the given owner holds it (one name of ReleaseAll).
-- KEYS[1]  lock hash
-- ARGV[1]  owner
-- ARGV[2]  the lock-released channel
-- Publishes like release.lua; no clock.
-- Returns 1 released, 0 not held by this owner.
local held = redis.call('HMGET', KEYS[1], 'owner', 'waited')
if held[1] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if held[2] then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
