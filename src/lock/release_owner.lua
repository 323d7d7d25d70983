-- release_owner.lua: free a lock if the given owner holds it (one name of ReleaseAll).
-- KEYS[1]  lock
-- ARGV[1]  owner
-- ARGV[2]  the lock-released channel
-- Publishes like release.lua; no clock.
-- Returns 1 released, 0 not held by this owner.
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local _, waited, _, _, owner = unpack_lease(value)
if owner ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if waited == 1 then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
