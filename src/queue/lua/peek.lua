-- peek.lua: look at tasks of one state without taking them, in delivery order.
-- Not read only: expired leases are returned first, as Lease would (so a lease that
-- ran out shows as READY or DEAD, not IN_FLIGHT), and that is a write. It tells the
-- caller nothing was stored, and a lost return is made again by the next script, so
-- it does not wait for replicas (@no-replica-wait).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] state ('ready' | 'delayed' | 'in_flight' | 'dead' | 'completed' |
-- 'cancelled'), or 'task' for the one
-- task whose id is ARGV[5] in whatever state; ARGV[2] limit, ARGV[3] the most payload
-- bytes to return (always at least one task), ARGV[4] '1' when ARGV[5] names a group
-- (READY only: that group's tasks in its order). Pages of a state are ListTasks'
-- (list_tasks.lua).
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns 3 per task as include/push_row.lua's push_row(), receipts blanked; for
-- 'task', then its delivery history (include/attempts.lua) and result ('' for none).
--- @no-replica-wait
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "reclaim"
--- @include "within_budget"
--- @include "push_row"
--- @include "group_state"
--- @include "rotation"
--- @include "promote"
local wanted, limit, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local group = ARGV[4] == '1' and ARGV[5] or nil

local now = now_ms()
open_flow(now)
if reclaim(now) or (flow.on and promote(now)) then
  return again()
end
-- A group's READY tasks in its delivery order: the task it must deliver next first.
local function group_members()
  local members = {}
  local head = redis.call('HGET', groups, gfield(group, G_HEAD))
  if head and head_ready(head) then
    members[1] = member(meta_fields(redis.call('HGET', tasks, head)), head)
  end
  local entries = group_entries(group, limit)
  for _, entry in ipairs(entries) do
    local entry_member = member_of_entry(group, entry)
    if #members < limit and entry_member ~= members[1] then
      members[#members + 1] = entry_member
    end
  end
  return members
end
-- Members of a zset by rank, from `first` on, at most `limit` and none at `stop` or
-- after (nil: to the end).
local function by_rank(key, first, stop)
  local last = first + limit - 1
  if stop and last >= stop then
    last = stop - 1
  end
  if last < first then
    return {}
  end
  return redis.call('ZRANGE', key, first, last)
end
local members
if wanted == 'task' then
  local raw = redis.call('HGET', tasks, ARGV[5])
  members = {}
  if raw then
    members[1] = member(meta_fields(raw), ARGV[5])
  end
elseif wanted == 'ready' and flow.on then
  if group then
    members = group_members()
  else
    members = by_rank(ranked, 0)
  end
elseif wanted == 'ready' and group and group ~= '' then
  -- Not in flow mode: no task has a group.
  members = {}
elseif wanted == 'ready' then
  members = by_rank(pending, 0, redis.call('ZCOUNT', pending, '-inf', now))
elseif wanted == 'delayed' then
  members = by_rank(pending, redis.call('ZCOUNT', pending, '-inf', now))
elseif wanted == 'in_flight' then
  members = by_rank(inflight, 0)
elseif wanted == 'completed' then
  members = by_rank(completed, 0)
elseif wanted == 'cancelled' then
  members = by_rank(cancelled, 0)
else
  members = by_rank(dead, 0)
end
local out = {}
local ids, raws, bodies, failures, progresses = within_budget(members, budget)
for n, id in ipairs(ids) do
  local meta = raws[n] and decode(raws[n])
  if meta then
    meta.receipt = nil
    push_row(out, id, meta, bodies[n], now, failures[n], progresses[n])
  end
end
if wanted == 'task' and #out > 0 then
  out[#out + 1] = redis.call('HGET', attempts, ids[1]) or ''
  out[#out + 1] = redis.call('HGET', results, ids[1]) or ''
end
return out
