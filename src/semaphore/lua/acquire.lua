-- acquire.lua: take `permits` of a semaphore if they fit and nobody is ahead in the
-- line; otherwise, for a caller that waits, join the line (or, already in it, renew
-- its entry's lease). One run of every waiting call's loop.
-- KEYS[1]  holders: zset token -> lease end (Unix ms)
-- KEYS[2]  line: zset `<ticket>:<permits>` -> arrival (include/line.lua)
-- KEYS[3]  leases: zset of the same members -> end of the entry's lease (Unix ms)
-- KEYS[4]  sem: hash of limit, in_use, fence (the last fencing token), seq (line
--          arrivals), `h:<token>` holders (include/holder.lua) and retry fields
-- ARGV[1]  token (random, made by the server)
-- ARGV[2]  owner
-- ARGV[3]  limit the caller states
-- ARGV[4]  permits
-- ARGV[5]  ttl in ms
-- ARGV[6]  request_id ('' for none)
-- ARGV[7]  ticket: the caller's place in the line ('' for a caller that does not wait)
-- ARGV[8]  how long a line entry lasts unless renewed, ms
-- ARGV[9]  the semaphore-wake channel: the tickets that may go now are published on it
-- Clock: Redis TIME. fencing = max(last + 1, TIME in µs), the locks' rule.
-- Returns {1, token, fencing, expires_at_ms, in_use, limit} acquired (or the same
-- lease again for a retried owner + request_id), {0, in_use, limit, next_ms} not now
-- (next_ms: the earliest end of a holder's lease, 0 for none; a line entry that ends
-- is pruned by the next waiter's renewal), or
-- {-1, limit} when live holders use another limit.
--- @include "clock"
--- @include "holder"
--- @include "keep_until"
--- @include "prune"
--- @include "line"
local holders, line, leases, sem = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, owner, limit, permits, ttl, request_id, ticket, line_ttl, channel =
  ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6],
  ARGV[7], tonumber(ARGV[8]), ARGV[9]

local now_us, now = redis_now()
local changed = prune(sem, holders, line, leases, now)
local state = redis.call('HMGET', sem, 'limit', 'in_use', 'fence')
local stored, in_use = tonumber(state[1]), tonumber(state[2]) or 0

if request_id ~= '' then
  local retried = redis.call('HGET', sem, retry_field(owner, request_id))
  local value = retried and redis.call('HGET', sem, 'h:' .. retried)
  if value then
    local _, fencing, expires_at = unpack_holder(value)
    return {1, retried, fencing, expires_at, in_use, stored}
  end
end

if stored ~= limit then
  if redis.call('ZCARD', holders) > 0 then
    return {-1, stored}
  end
  redis.call('HSET', sem, 'limit', limit)
  changed = true
end

local member = ticket ~= '' and (ticket .. ':' .. permits) or nil
local in_line = member and redis.call('ZSCORE', line, member)
local fits
if in_line then
  local _, found = fitting_front(line, in_use, limit, member)
  fits = found
else
  fits = in_use + permits <= limit and redis.call('ZCARD', line) == 0
end

if fits then
  local fencing = now_us
  if state[3] and tonumber(state[3]) + 1 > now_us then
    fencing = tonumber(state[3]) + 1
  end
  local expires_at = now + ttl
  in_use = in_use + permits
  redis.call('HSET', sem, 'h:' .. token, pack_holder(permits, fencing, expires_at, owner,
    request_id, 0), 'in_use', in_use, 'fence', fencing)
  if request_id ~= '' then
    redis.call('HSET', sem, retry_field(owner, request_id), token)
  end
  redis.call('ZADD', holders, expires_at, token)
  if in_line then
    redis.call('ZREM', line, member)
    redis.call('ZREM', leases, member)
  end
  -- The fence outlives the holders by a minute, as a lock's does.
  keep_until(sem, expires_at + 60000)
  keep_until(holders, expires_at + 60000)
  if changed then
    wake_front(line, in_use, limit, channel)
  end
  return {1, token, fencing, expires_at, in_use, limit}
end

if member then
  if not in_line then
    redis.call('ZADD', line, redis.call('HINCRBY', sem, 'seq', 1), member)
  end
  local entry_end = now + line_ttl
  redis.call('ZADD', leases, entry_end, member)
  keep_until(sem, entry_end + 60000)
  keep_until(line, entry_end)
  keep_until(leases, entry_end)
end
if changed then
  wake_front(line, in_use, limit, channel)
end
local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
return {0, in_use, limit, tonumber(first[2]) or 0}
