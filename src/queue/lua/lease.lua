-- lease.lua: take up to max_tasks READY tasks, earliest due first (ties in enqueue
-- order), first returning expired leases.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] max_tasks, ARGV[2] visibility ms, ARGV[3] auto_ack ('1'/'0'),
-- ARGV[4] the most payload bytes to return (always at least one task),
-- ARGV[5] receipt prefix (random, per call)
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- In flow mode (include/group_state.lua) the tasks come in the rotation of groups, within the
-- queue's and groups' pause, caps and rate limits.
-- Returns {next_due, held back, rows...}: next_due is when to look again: the first pending task
-- not taken (flow mode: next_start()), or the first lease to expire, if sooner; -1 if
-- none; then the limits that held back a deliverable task (pick.lua's pick(), ''
-- for none); then 3 per task
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
--- @include "group_state"
--- @include "rotation"
--- @include "promote"
--- @include "pick"
--- @include "next_start"
--- @include "history"
--- @include "attempts"
--- @include "keep"
--- @include "announce"
local max_tasks, visibility, auto_ack = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local budget, receipt_prefix = tonumber(ARGV[4]), ARGV[5]

local now = now_ms()
open_flow(now)
if reclaim(now) or (flow.on and promote(now)) then
  return again()
end
local lease_end_score = string.format('%d', now + visibility)
local due, ids, raws, bodies, failures, progresses, retry_at, held_back
if flow.on then
  wake_groups(now)
  due, ids, raws, retry_at, held_back = pick(max_tasks, budget, now, auto_ack)
  bodies, failures, progresses = hmget(payloads, ids), hmget(errors, ids),
    hmget(progress, ids)
else
  due = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0,
    math.min(max_tasks, PLAIN_RUN_DELIVERIES))
  ids, raws, bodies, failures, progresses = within_budget(due, budget)
end
local out, writes, leases, ends = {0, held_back or ''}, {}, {}, ending()
-- auto_ack: each delivery ends ACKED as it starts; a queue that keeps ended tasks
-- keeps it as COMPLETED (no result).
local keep, kept, acked = auto_ack and keeping() ~= nil, 0, 0
local lease_end, nw = now + visibility, 0
for n, id in ipairs(ids) do
  local raw = raws[n]
  if raw and auto_ack then
    local meta = decode(raw)
    take(meta, now)
    acked = acked + 1
    announce(now, id, meta, 'completed', (redis.call('HGET', attempts, id) or '') ..
      pack_attempt(meta.attempt, now, now, OUT_ACKED, '', ''), '')
    if keep then
      record_attempt(id, meta, now, OUT_ACKED)
      keep_ended(id, meta, COMPLETED, completed, now)
      kept = kept + 1
    else
      ends.forget(id, meta, now)
    end
    push_row(out, id, meta, bodies[n], now, failures[n], progresses[n])
  elseif raw then
    nw = nw + 2
    writes[nw - 1] = id
    writes[nw] = lease_packed(out, id, raw, receipt_prefix, lease_end, '', '', now, bodies[n],
      failures[n], progresses[n])
    leases[nw - 1] = lease_end_score
    leases[nw] = due[n]
  end
end
write_deliveries(flow.on and 0 or #ids, writes, leases)
ends.flush()
if keep then
  prune(completed, now, kept)
end
if acked > 0 then
  redis.call('HINCRBY', counters, 'o:' .. OUT_ACKED, acked)
end
local next_due, first_lease_end = first_score(pending), first_score(inflight)
if flow.on then
  next_due = next_start(now, retry_at)
end
if first_lease_end >= 0 and (next_due < 0 or first_lease_end < next_due) then
  next_due = first_lease_end
end
out[1] = next_due
record_history(now, #ids)
return out
