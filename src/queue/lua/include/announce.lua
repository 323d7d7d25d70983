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
-- A waiter's replica that was not subscribed when it was published (starting, or its
-- pub/sub connection cut) looks again once subscribed (wait.lua, ARGV[4] '2'), so
-- the message is also kept in `told` for TOLD_KEEP_MS: longer than the subscriber's
-- retries (a subscribe times out after 2 s, attempts are at most 1 s apart). Each end
-- kept drops a few whose time passed, and the two keys expire with the last one, so
-- a queue that goes quiet keeps none.
--- @include "keys"
--- @include "group_state"
--- @include "push_row"

local TOLD_KEEP_MS = 30000
local TOLD_DROPS_PER_END = 16

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
  local passed = redis.call('ZRANGEBYSCORE', told_until, '-inf', string.format('(%d', now),
    'LIMIT', 0, TOLD_DROPS_PER_END)
  if #passed > 0 then
    redis.call('ZREM', told_until, unpack(passed))
    redis.call('HDEL', told, unpack(passed))
  end
  redis.call('HSET', told, id, message)
  redis.call('ZADD', told_until, now + TOLD_KEEP_MS, id)
  redis.call('PEXPIRE', told, TOLD_KEEP_MS)
  redis.call('PEXPIRE', told_until, TOLD_KEEP_MS)
end
