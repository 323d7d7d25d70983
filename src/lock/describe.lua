-- describe.lua: who holds a lock and until when (read only).
-- KEYS[1]  lock
-- ARGV[1]  a token to compare with the holder's ('' for none)
-- No clock: an expired lease is already gone from Redis' point of view.
-- Returns {0} free, {1, owner, fencing, expires_at_ms, held_by_token (0/1)} held.
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local token, _, fencing, expires_at, owner = unpack_lease(value)
local mine = 0
if ARGV[1] ~= '' and token == ARGV[1] then
  mine = 1
end
return {1, owner, fencing, expires_at, mine}
