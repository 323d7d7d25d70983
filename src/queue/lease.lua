-- lease.lua: take up to max_tasks READY tasks, earliest due first (ties in enqueue
-- order), first returning expired leases.
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] max_tasks, ARGV[2] visibility ms, ARGV[3] auto_ack ('1'/'0'),
-- ARGV[4] the most payload bytes to return (always at least one task),
-- ARGV[5] receipt prefix (random, per call)
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (prelude.lua reclaim()); the store runs it again.
-- Returns {next_due, rows...}: next_due is the score of the first pending task not
-- taken (or of the first lease to expire, if sooner; -1 if none), then 9 per task
-- as prelude.lua's push_row().
local now = now_ms()
if reclaim(now) then
  return again()
end
local max_tasks, visibility, auto_ack = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local budget = tonumber(ARGV[4])
local lexp_score = string.format('%d', now + visibility)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, max_tasks)
local ids, raws, payloads = within_budget(due, budget)
local out, writes, leases, ends = {0}, {}, {}, ending()
for n, id in ipairs(ids) do
  local meta = raws[n] and decode(raws[n])
  if meta then
    take(meta)
    if auto_ack then
      ends.forget(id, meta, now)
    else
      lease_out(id, meta, ARGV[5], now + visibility)
      writes[#writes + 1] = id; writes[#writes + 1] = encode(meta)
      leases[#leases + 1] = lexp_score; leases[#leases + 1] = due[n]
    end
    push_row(out, id, meta, payloads[n], now)
  end
end
write_deliveries(#ids, writes, leases)
ends.flush()
local next_due, lease_end = first_score(KEYS[1]), first_score(KEYS[2])
if lease_end >= 0 and (next_due < 0 or lease_end < next_due) then
  next_due = lease_end
end
out[1] = next_due
return out
