-- fire.lua: one fire of a schedule: enqueues its task unless that fire time was
-- already handled, in the same script that records it, so a fire time is enqueued
-- once however many replicas fire it, crash or retry.
-- KEYS: the queue's keys (include/keys.lua), then KEYS[17] `fired`: a hash on the
--   queue's slot, schedule name -> "<handled> <enqueued> <id>": the last fire time
--   handled (enqueued or skipped), the last one that enqueued a task (0: none yet),
--   and that task's id.
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] the schedule's
--   name, ARGV[4] the fire time (Unix ms), ARGV[5] overlap ('s' skip while the last
--   fire's task is in the queue | 'a' allow), then the task in enqueue.lua's layout of
--   9 values (its id is the fire's, its due time the fire time, policy keep).
-- Clock: Redis TIME; a fire time still in Redis' future is not fired.
-- Returns {outcome, now, handled before, enqueued before, created}: outcome 'fired'
-- (the task is stored; created 0 when a task of that id was already there),
-- 'overlap' (skipped: the last fire's task is DELAYED, READY or IN_FLIGHT), 'done'
-- (this fire time was already handled) or 'early' (not yet due on Redis' clock).
-- A run that met a full run's worth of expired leases answers AGAIN (include/reclaim.lua).
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "flow"
--- @include "add"
local fired = KEYS[17]
local changed_channel, changed_message, name, at, overlap =
  ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local FIRST = 6

local now = now_ms()
if at > now then
  return {'early', now, 0, 0, 0}
end
local handled, enqueued, last_id = 0, 0, nil
local record = redis.call('HGET', fired, name)
if record then
  local h, e, id = string.match(record, '^(%d+) (%d+) (.*)$')
  handled, enqueued, last_id = tonumber(h), tonumber(e), id
end
if at <= handled then
  return {'done', now, handled, enqueued, 0}
end
open_flow(now)
-- The last fire's task may have run out of leases and gone DEAD: see it so.
if reclaim(now) then
  return again()
end
if overlap == 's' and enqueued > 0 then
  local meta = load(last_id)
  if meta and meta.state ~= DEAD then
    redis.call('HSET', fired, name, string.format('%d %d %s', at, enqueued, last_id))
    return {'overlap', now, handled, enqueued, 0}
  end
end
local out = add(ARGV, FIRST, 9, now, changed_channel, changed_message)
redis.call('HSET', fired, name, string.format('%d %d %s', at, at, ARGV[FIRST]))
return {'fired', now, handled, enqueued, out[1]}
