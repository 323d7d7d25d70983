-- peek.lua: look at tasks of one state without taking them, in delivery order.
-- Not read only: expired leases are returned first, as Lease would (so a lease that
-- ran out shows as READY or DEAD, not IN_FLIGHT), and that is a write. It tells the
-- caller nothing was stored, and a lost return is made again by the next script, so
-- it does not wait for replicas (@no-replica-wait).
-- KEYS: the queue's nine keys (include/keys.lua)
-- ARGV[1] state ('ready' | 'delayed' | 'in_flight' | 'dead'), ARGV[2] limit,
-- ARGV[3] the most payload bytes to return (always at least one task)
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns 9 per task as include/push_row.lua's push_row(), receipts blanked.
--- @no-replica-wait
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "reclaim"
--- @include "within_budget"
--- @include "push_row"
local wanted, limit, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local now = now_ms()
if reclaim(now) then
  return again()
end
local members
if wanted == 'ready' then
  members = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0, limit)
elseif wanted == 'delayed' then
  members = redis.call('ZRANGEBYSCORE', pending, '(' .. now, '+inf', 'LIMIT', 0, limit)
elseif wanted == 'in_flight' then
  members = redis.call('ZRANGE', inflight, 0, limit - 1)
else
  members = redis.call('ZRANGE', dead, 0, limit - 1)
end
local out = {}
local ids, raws, bodies = within_budget(members, budget)
for n, id in ipairs(ids) do
  local meta = raws[n] and decode(raws[n])
  if meta then
    meta.receipt = nil
    push_row(out, id, meta, bodies[n], now)
  end
end
return out
