-- release.lua: free a lock only if the given token holds it (never another holder's).
-- KEYS[1]  lock
-- KEYS[2]  index: the held locks (acquire.lua); the name leaves it
-- ARGV[1]  token
-- ARGV[2]  the lock-released channel
-- ARGV[3]  the attach generation the caller holds ('' for any: the unary Release)
-- ARGV[4]  the lock's name (its index member)
-- Publishes the lock key on the channel when a waiter marked the lease (free_lock); no
-- clock.
-- Returns 1 released, 0 not held by this token (or taken over by a later Hold stream).
--- @include "lease"
--- @include "same_attach"
--- @include "free_lock"
local lock, index = KEYS[1], KEYS[2]
local caller_token, released_channel, held_attach, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local value = redis.call('GET', lock)
if not value then
  return 0
end
local token, waited, _, _, _, _, attach = unpack_lease(value)
if token ~= caller_token or not same_attach(held_attach, attach) then
  return 0
end
free_lock(lock, waited, released_channel, index, name)
return 1
