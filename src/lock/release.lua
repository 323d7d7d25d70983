-- release.lua: free a lock only if the given token holds it (never another holder's).
-- KEYS[1]  lock
-- ARGV[1]  token
-- ARGV[2]  the lock-released channel
-- ARGV[3]  the attach generation the caller holds ('' for any: the unary Release)
-- Publishes the lock key on the channel when a waiter marked the lease (so one waiter
-- per replica wakes at once); no clock.
-- Returns 1 released, 0 not held by this token (or taken over by a later Hold stream).
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local token, waited, _, _, _, _, attach = unpack_lease(value)
if token ~= ARGV[1] or not same_attach(ARGV[3], attach) then
  return 0
end
redis.call('DEL', KEYS[1])
if waited == 1 then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
