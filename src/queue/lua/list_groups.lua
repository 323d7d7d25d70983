-- list_groups.lua: a page of a queue's groups that hold a task or a config, by name,
-- with their depths and configs. Not read only: expired leases are returned and due
-- tasks promoted first (as a Lease would), so the depths agree with what a Lease
-- would find; like peek.lua it does not wait for replicas (@no-replica-wait).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the last group of the previous page ('' with ARGV[2] '0': from the start),
-- ARGV[2] '1' when ARGV[1] is such a group, ARGV[3] the page size
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases (or promoted a full run of
-- due tasks) answers AGAIN and does nothing else; the store runs it again.
-- Returns {more (0/1), then 7 per group: name, ready, delayed, in flight, dead,
-- paused (0/1), weight (0: the default)}.
--- @no-replica-wait
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "group_state"
--- @include "rotation"
--- @include "promote"
local after, has_after, size = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])

local now = now_ms()
open_flow(now)
if reclaim(now) or (flow.on and promote(now)) then
  return again()
end
local out = {0}
if not flow.on then
  -- No task has a group yet: the ungrouped tasks are the only group.
  local waiting, leased_out, dead_tasks = redis.call('ZCARD', pending),
    redis.call('ZCARD', inflight), redis.call('ZCARD', dead)
  if not has_after and size > 0 and waiting + leased_out + dead_tasks > 0 then
    local due = redis.call('ZCOUNT', pending, '-inf', now)
    local row = {'', due, waiting - due, leased_out, dead_tasks, 0, 0}
    for _, value in ipairs(row) do
      out[#out + 1] = value
    end
  end
  return out
end
local from = '-'
if has_after then
  from = '(' .. after
end
local names = redis.call('ZRANGEBYLEX', group_index, from, '+', 'LIMIT', 0, size + 1)
if #names > size then
  out[1] = 1
  names[#names] = nil
end
for _, group in ipairs(names) do
  local state = redis.call('HMGET', groups, gfield(group, G_WAITING), gfield(group, G_IN_FLIGHT),
    gfield(group, G_DEAD), gfield(group, G_PAUSED), gfield(group, G_WEIGHT))
  local lo, hi = group_range(group)
  local ready_count = redis.call('ZLEXCOUNT', ready, lo, hi)
  local waiting, leased_out, dead_tasks = number_of(state[1]), number_of(state[2]),
    number_of(state[3])
  local n = #out
  out[n + 1] = group
  out[n + 2] = ready_count
  out[n + 3] = math.max(waiting - ready_count, 0)
  out[n + 4] = leased_out
  out[n + 5] = dead_tasks
  out[n + 6] = state[4] == '1' and 1 or 0
  out[n + 7] = number_of(state[5])
end
return out
