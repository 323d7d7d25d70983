#!lua flags=no-writes
-- describe.lua: a semaphore's limit, permits in use, live holders and waiters. Read
-- only: the flag above makes Redis refuse any write from it.
-- KEYS[1..4]  holders, line, leases, sem (acquire.lua)
-- ARGV[1]  the most holders listed
-- Clock: Redis TIME: holders and line entries whose lease ended are not counted, even
-- before a script pruned them (at most PRUNE of them are subtracted, as prune.lua).
-- Returns {limit, in_use, waiting, holders_listed, then per holder: owner, permits,
-- fencing, expires_at_ms}.
--- @include "clock"
--- @include "holder"
--- @include "prune"
local holders, leases, sem = KEYS[1], KEYS[3], KEYS[4]
local most = tonumber(ARGV[1])

local _, now = redis_now()
local state = redis.call('HMGET', sem, 'limit', 'in_use')
local limit, in_use = tonumber(state[1]) or 0, tonumber(state[2]) or 0
for _, token in ipairs(redis.call('ZRANGE', holders, '-inf', now, 'BYSCORE', 'LIMIT', 0, PRUNE)) do
  local value = redis.call('HGET', sem, 'h:' .. token)
  if value then
    in_use = in_use - unpack_holder(value)
  end
end
if in_use < 0 then
  in_use = 0
end
local waiting = redis.call('ZCOUNT', leases, '(' .. now, '+inf')
local reply = {limit, in_use, waiting, 0}
local listed = 0
for _, token in ipairs(redis.call('ZRANGE', holders, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, most)) do
  local value = redis.call('HGET', sem, 'h:' .. token)
  if value then
    local permits, fencing, expires_at, owner = unpack_holder(value)
    reply[#reply + 1] = owner
    reply[#reply + 1] = permits
    reply[#reply + 1] = fencing
    reply[#reply + 1] = expires_at
    listed = listed + 1
  end
end
reply[4] = listed
return reply
