-- describe.lua: who holds a lock and until when (read only).
-- KEYS[1]  lock hash
-- ARGV[1]  a token to compare with the holder's ('' for none)
-- No clock: an expired lease is already gone from Redis' point of view.
-- Returns {0} free, {1, owner, fencing, expires_at_ms, held_by_token (0/1)} held.
local held = redis.call('HMGET', KEYS[1], 'token', 'owner', 'fencing', 'expires_at')
if not held[1] then
  return {0}
end
local mine = 0
if ARGV[1] ~= '' and held[1] == ARGV[1] then
  mine = 1
end
return {1, held[2], held[3], held[4], mine}
