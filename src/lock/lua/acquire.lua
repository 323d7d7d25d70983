-- acquire.lua: take a lock if it is free, in one atomic step (the lease and its expiry
-- are written together: no SETNX-then-EXPIRE window).
-- KEYS[1]  lock (the packed lease, see include/lease.lua; PX = the lease)
-- KEYS[2]  fence: the last fencing token of this name (outlives the lease)
-- KEYS[3]  watched: set while a Watch stream watches the name (watch.lua)
-- KEYS[4]  index: the held locks ListLocks reads (zset name -> lease end, Unix ms);
--          a win adds the name, and one win in PRUNE_EVERY (by its fencing token's
--          low bits) also drops up to PRUNE names whose lease ended unreleased, so the
--          index follows the held locks, not every name ever taken
-- ARGV[1]  token (random, made by the server)
-- ARGV[2]  owner
-- ARGV[3]  ttl in ms
-- ARGV[4]  request_id ('' for none)
-- ARGV[5]  '1' if the caller will wait when the lock is held (marks the lease so that
--          its release publishes a wake-up), else '0'
-- ARGV[6]  the lock-changed channel: a win of a watched name is published on it (the
--          lock key), and the new lease is marked so that its end is published too
-- ARGV[7]  the lock's name (its index member)
-- Clock: Redis TIME. fencing = max(last + 1, TIME in µs): strictly increasing even if
-- a crash lost the fence's last second of writes, as long as the Redis clock does not
-- run backwards. Numbers stay Lua numbers (exact below 2^53; µs since 1970 are ~2^51).
-- Returns {1, token, fencing, expires_at_ms} acquired (or the same lease again for a
-- retried owner + request_id), {0, owner, fencing, expires_at_ms} held by another.
--- @include "lease"
-- One win in PRUNE_EVERY drops up to PRUNE ended names from the index: two per win.
local PRUNE_EVERY, PRUNE = 16, 32
local lock, fence, watched, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local new_token, caller_owner, ttl_ms, caller_request_id, will_wait, changed_channel, name =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]

local got = redis.call('MGET', lock, fence, watched)
if got[1] then
  local token, waited, fencing, expires_at, owner, request_id, attach = unpack_lease(got[1])
  if caller_request_id ~= '' and owner == caller_owner and request_id == caller_request_id then
    return {1, token, fencing, expires_at}
  end
  if will_wait == '1' and waited % 2 == 0 then
    redis.call('SET', lock,
      pack_lease(token, waited + WAITER, fencing, expires_at, owner, request_id, attach), 'KEEPTTL')
  end
  return {0, owner, fencing, expires_at}
end
local now = redis.call('TIME')
local now_us = now[1] * 1000000 + now[2]
local fencing = now_us
if got[2] and got[2] + 1 > now_us then
  fencing = got[2] + 1
end
local ttl = tonumber(ttl_ms)
local expires_at = (now_us - now_us % 1000) / 1000 + ttl
local marks = 0
if got[3] then
  marks = WATCHER
end
redis.call('SET', lock, pack_lease(new_token, marks, fencing, expires_at, caller_owner,
  caller_request_id), 'PX', ttl)
redis.call('SET', fence, fencing, 'PX', ttl + 60000)
if fencing % PRUNE_EVERY == 0 then
  local ended = redis.call('ZRANGE', index, '-inf', expires_at - ttl, 'BYSCORE', 'LIMIT', 0, PRUNE)
  if #ended > 0 then
    redis.call('ZREM', index, unpack(ended))
  end
end
redis.call('ZADD', index, expires_at, name)
if got[3] then
  redis.call('PUBLISH', changed_channel, lock)
end
return {1, new_token, fencing, expires_at}
