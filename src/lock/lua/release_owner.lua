-- release_owner.lua: free a lock if the given owner holds it (one name of ReleaseAll).
-- KEYS[1]  lock
-- KEYS[2]  index: the held locks (acquire.lua); the name leaves it
-- ARGV[1]  owner
-- ARGV[2]  the lock-released channel
-- ARGV[3]  the lock's name (its index member)
-- Publishes like release.lua (free_lock); no clock.
-- Returns 1 released, 0 not held by this owner.
--- @include "lease"
--- @include "free_lock"
local lock, index = KEYS[1], KEYS[2]
local caller_owner, released_channel, name = ARGV[1], ARGV[2], ARGV[3]

local value = redis.call('GET', lock)
if not value then
  return 0
end
local _, waited, _, _, owner = unpack_lease(value)
if owner ~= caller_owner then
  return 0
end
free_lock(lock, waited, released_channel, index, name)
return 1
