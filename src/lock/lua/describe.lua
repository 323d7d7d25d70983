#!lua flags=no-writes
-- describe.lua: who holds a lock and until when. Read only: the flag above makes
-- Redis refuse any write from it.
-- KEYS[1]  lock
-- ARGV[1]  a token to compare with the holder's ('' for none)
-- No clock: an expired lease is already gone from Redis' point of view.
-- Returns {0} free, {1, owner, fencing, expires_at_ms, held_by_token (0/1)} held.
--- @include "lease"
local lock = KEYS[1]
local caller_token = ARGV[1]

local value = redis.call('GET', lock)
if not value then
  return {0}
end
local token, _, fencing, expires_at, owner = unpack_lease(value)
local mine = 0
if caller_token ~= '' and token == caller_token then
  mine = 1
end
return {1, owner, fencing, expires_at, mine}
