-- peek.lua: look at tasks of one state without taking them, in delivery order
-- (expired leases are returned first, as Lease would).
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] state ('ready' | 'delayed' | 'in_flight' | 'dead'), ARGV[2] limit,
-- ARGV[3] the most payload bytes to return (always at least one task)
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (prelude.lua reclaim()); the store runs it again.
-- Returns 9 per task as prelude.lua's push_row(), receipts blanked.
local now = now_ms()
if reclaim(now) then
  return again()
end
local state, limit, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local members
if state == 'ready' then
  members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
elseif state == 'delayed' then
  members = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, limit)
elseif state == 'in_flight' then
  members = redis.call('ZRANGE', KEYS[2], 0, limit - 1)
else
  members = redis.call('ZRANGE', KEYS[3], 0, limit - 1)
end
local out = {}
local ids, raws, payloads = within_budget(members, budget)
for n, id in ipairs(ids) do
  local meta = raws[n] and decode(raws[n])
  if meta then
    meta.rcpt = nil
    push_row(out, id, meta, payloads[n], now)
  end
end
return out
