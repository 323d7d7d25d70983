-- lease.lua: take up to max_tasks READY tasks, earliest due first (ties in enqueue
-- order), first returning expired leases.
-- KEYS[1..7] as in prelude.lua
-- ARGV[1] max_tasks, ARGV[2] visibility ms, ARGV[3] auto_ack ('1'/'0'),
-- ARGV[4] the most payload bytes to return (always at least one task),
-- ARGV[5] receipt prefix (random, per call)
-- Clock: Redis TIME.
-- Returns {next_due, rows...}: next_due is the score of the first pending task not
-- taken (or of the first lease to expire, if sooner; -1 if none), then 9 per task
-- as prelude.lua's row().
local now = now_ms()
reclaim(now)
local max_tasks, visibility, auto_ack = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local budget = tonumber(ARGV[4])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, max_tasks)
local out = {0}
each_within_budget(due, budget, function(member, id, meta, payload)
  redis.call('ZREM', KEYS[1], member)
  meta.att = meta.att + 1
  meta.st = 'f'
  if auto_ack then
    forget(id, meta, now)
  else
    meta.rcpt = ARGV[5] .. string.format('%x', #out) .. ':' .. id
    meta.lexp = now + visibility
    store(id, meta)
    redis.call('ZADD', KEYS[2], meta.lexp, member)
  end
  for _, v in ipairs(row(id, meta, payload, now)) do
    table.insert(out, v)
  end
end)
local next_due = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then
  next_due = tonumber(first[2])
end
local lease_end = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if lease_end[2] and (next_due < 0 or tonumber(lease_end[2]) < next_due) then
  next_due = tonumber(lease_end[2])
end
out[1] = next_due
return out
