-- release_owner.lua: free a lock if the given owner holds it (one name of ReleaseAll).
-- KEYS[1]  lock
-- ARGV[1]  owner
-- ARGV[2]  the lock-released channel
-- Publishes like release.lua (free_lock); no clock.
-- Returns 1 released, 0 not held by this owner.
--- @include "lease"
--- @include "free_lock"
local lock = KEYS[1]
local caller_owner, released_channel = ARGV[1], ARGV[2]

local value = redis.call('GET', lock)
if not value then
  return 0
end
local _, waited, _, _, owner = unpack_lease(value)
if owner ~= caller_owner then
  return 0
end
free_lock(lock, waited, released_channel)
return 1
