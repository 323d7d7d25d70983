-- lease.lua: take up to max_tasks READY tasks, earliest due first (ties in enqueue
-- order), first returning expired leases.
-- KEYS: the queue's nine keys (include/keys.lua)
-- ARGV[1] max_tasks, ARGV[2] visibility ms, ARGV[3] auto_ack ('1'/'0'),
-- ARGV[4] the most payload bytes to return (always at least one task),
-- ARGV[5] receipt prefix (random, per call)
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns {next_due, rows...}: next_due is the score of the first pending task not
-- taken (or of the first lease to expire, if sooner; -1 if none), then 9 per task
-- as include/push_row.lua's push_row().
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "reclaim"
--- @include "within_budget"
--- @include "lease_out"
--- @include "ending"
--- @include "first_score"
--- @include "push_row"
local max_tasks, visibility, auto_ack = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local budget, receipt_prefix = tonumber(ARGV[4]), ARGV[5]

local now = now_ms()
if reclaim(now) then
  return again()
end
local lease_end_score = string.format('%d', now + visibility)
local due = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0, max_tasks)
local ids, raws, bodies = within_budget(due, budget)
local out, writes, leases, ends = {0}, {}, {}, ending()
for n, id in ipairs(ids) do
  local meta = raws[n] and decode(raws[n])
  if meta then
    take(meta)
    if auto_ack then
      ends.forget(id, meta, now)
    else
      lease_out(id, meta, receipt_prefix, now + visibility)
      writes[#writes + 1] = id; writes[#writes + 1] = encode(meta)
      leases[#leases + 1] = lease_end_score; leases[#leases + 1] = due[n]
    end
    push_row(out, id, meta, bodies[n], now)
  end
end
write_deliveries(#ids, writes, leases)
ends.flush()
local next_due, first_lease_end = first_score(pending), first_score(inflight)
if first_lease_end >= 0 and (next_due < 0 or first_lease_end < next_due) then
  next_due = first_lease_end
end
out[1] = next_due
return out
