-- announce.lua: tells the callers waiting for a task (Wait, Enqueue.wait, on any
-- replica) that it is done: COMPLETED, DEAD or CANCELLED. A Wait registers the id in
-- `watched` and marks the queue's config (`watch_until`: the latest end of any wait,
-- `watch_channel`: where to publish, wait.lua), so a queue nobody waits on pays one
-- comparison of a field open_flow() read anyway, and one somebody waits on a ZSCORE
-- per ended task.
-- The message (decoded by src/queue/waits.rs): the queue's pending key, then a task
-- row as include/push_row.lua lays it out, then its history and result; each value
-- as a 4-byte little-endian length and its bytes. It carries the result and the
-- payload, so a waiter is answered even when the queue keeps nothing.
--- @include "keys"
--- @include "group_state"
--- @include "push_row"

-- Whether anyone may wait for a task of this queue at `now`.
local function awaited(now)
  return number_of(flow.cfg.watch_until) >= now
end

local function pack_values(values)
  local out = {}
  for n, value in ipairs(values) do
    out[n] = struct.pack('<I4', #value) .. value
  end
  return table.concat(out)
end

-- Publishes the end of task `id` (its meta as it ended, `state_name` one of
-- 'completed', 'dead', 'cancelled') when a waiter registered for it; `history` and
-- `result` as they are at its end (nil: as stored). Call before the task's records go.
local function announce(now, id, meta, state_name, history, result)
  if not awaited(now) then
    return
  end
  local until_ms = redis.call('ZSCORE', watched, id)
  if not until_ms then
    return
  end
  redis.call('ZREM', watched, id)
  if tonumber(until_ms) < now then
    return
  end
  local values = {pending}
  push_fields(values, id, redis.call('HGET', payloads, id) or '', state_name, meta.due,
    meta.enqueued_at, meta.attempt, meta.max_attempts, '', 0, meta.group, meta.priority,
    redis.call('HGET', errors, id) or '', redis.call('HGET', progress, id) or '')
  values[#values + 1] = history or redis.call('HGET', attempts, id) or ''
  values[#values + 1] = result or redis.call('HGET', results, id) or ''
  local message = pack_values(values)
  redis.call('PUBLISH', flow.cfg.watch_channel, message)
end
