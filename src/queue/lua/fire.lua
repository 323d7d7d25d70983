-- fire.lua: fires of schedules into one queue, each enqueuing its task unless that
-- fire time was already handled, in the same script that records it, so a fire time
-- is enqueued once however many replicas fire it, crash or retry. The fires due at
-- one instant into one queue go in one run.
-- KEYS: the queue's keys (include/keys.lua), then KEYS[QUEUE_KEY_COUNT + 1] `fired`: a hash on the
--   queue's slot, schedule name -> "<handled> <enqueued> <id>": the last fire time
--   handled (enqueued or skipped), the last one that enqueued a task (0: none yet),
--   and that task's id.
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] n, the number of
--   fires; then n triples: the schedule's name, the fire time (Unix ms), overlap ('s'
--   skip while the last fire's task is in the queue | 'a' allow); then the n tasks in
--   enqueue.lua's layout of 9 values (each its fire's id, due at the fire time,
--   policy keep).
-- Clock: Redis TIME; a fire time still in Redis' future is not fired.
-- Returns {now, then per fire: outcome, handled before, enqueued before, created}:
-- outcome 'fired' (the task is stored; created 0 when a task of that id was already
-- there), 'overlap' (skipped: the last fire's task is DELAYED, READY or IN_FLIGHT),
-- 'done' (this fire time was already handled) or 'early' (not yet due on Redis' clock).
-- A run that met a full run's worth of expired leases answers AGAIN (include/reclaim.lua).
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "group_state"
--- @include "add"
local fired = KEYS[QUEUE_KEY_COUNT + 1]
local changed_channel, changed_message, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local TASKS = 4 + 3 * n

local now = now_ms()
open_flow(now)
-- The last fire's task may have run out of leases and gone DEAD: see it so.
if reclaim(now) then
  return again()
end
local names = {}
for i = 1, n do
  names[i] = ARGV[4 + 3 * (i - 1)]
end
local records = redis.call('HMGET', fired, unpack(names))
local out, batch, adding, writes = {now}, {}, {}, {}
for i = 1, n do
  local at, overlap = tonumber(ARGV[5 + 3 * (i - 1)]), ARGV[6 + 3 * (i - 1)]
  local handled, enqueued, last_id = 0, 0, nil
  if records[i] then
    local h, e, id = string.match(records[i], '^(%d+) (%d+) (.*)$')
    handled, enqueued, last_id = tonumber(h), tonumber(e), id
  end
  local outcome = 'fired'
  if at > now then
    outcome = 'early'
  elseif at <= handled then
    outcome = 'done'
  elseif overlap == 's' and enqueued > 0 then
    local meta = load(last_id)
    if meta and meta.state ~= DEAD then
      outcome = 'overlap'
      writes[#writes + 1] = names[i]
      writes[#writes + 1] = string.format('%d %d %s', at, enqueued, last_id)
    end
  end
  local task = TASKS + 9 * (i - 1)
  if outcome == 'fired' then
    for k = 0, 8 do
      batch[#batch + 1] = ARGV[task + k]
    end
    adding[#adding + 1] = #out + 4
    writes[#writes + 1] = names[i]
    writes[#writes + 1] = string.format('%d %d %s', at, at, ARGV[task])
  end
  out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = outcome, handled, enqueued, 0
end
if #batch > 0 then
  local added = add(batch, 1, 9, now, changed_channel, changed_message)
  for k, at in ipairs(adding) do
    out[at] = added[3 * (k - 1) + 1]
  end
end
if #writes > 0 then
  redis.call('HSET', fired, unpack(writes))
end
return out
