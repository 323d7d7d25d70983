-- nack.lua: give a delivery back, due again at now + delay, or DEAD when it was the
-- last attempt or the worker gave up; a stale receipt changes nothing. A delivery
-- cancelled while it ran ends as CANCELLED (include/cancelling.lua).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] receipt, ARGV[2] delay ms, ARGV[3] the queue-changed channel,
-- ARGV[4] its message, ARGV[5] the slot-freed channel, ARGV[6] the error (empty:
-- none; the caller cut it to its bound), ARGV[7] '1' to give up (DEAD now)
-- Clock: Redis TIME.
-- Returns {requeued 0/1, dead 0/1} ({0, 0} also for a delivery cancelled while it ran).
--- @include "now_ms"
--- @include "meta"
--- @include "delivery"
--- @include "ending"
--- @include "give_back"
--- @include "group_state"
local receipt, delay_ms, changed_channel, changed_message, slot_freed_channel =
  ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local failure, give_up = ARGV[6], ARGV[7] == '1'

local now = now_ms()
open_flow(now)
local id, meta = delivery(receipt, now)
if not id then
  return {0, 0}
end
local ends = ending()
local tag = meta.tag
if meta.state == STOPPING then
  -- Cancelled while it ran: the Nack ends it as CANCELLED, not waiting again.
  end_cancelled(ends, id, meta, now)
  if ends.flush() then
    redis.call('PUBLISH', changed_channel, changed_message)
  end
  if tag then
    redis.call('PUBLISH', slot_freed_channel, tag)
  end
  return {0, 0}
end
ends.unlease(id, meta)
local freed = ends.flush()
if failure ~= '' then
  redis.call('HSET', errors, id, failure)
end
local outcome = give_up and OUT_GAVE_UP or OUT_NACKED
local state = give_back(id, meta, now + delay_ms, give_up, now, outcome, failure)
if tag then
  redis.call('PUBLISH', slot_freed_channel, tag)
end
if state == DEAD then
  if freed then
    redis.call('PUBLISH', changed_channel, changed_message)
  end
  return {0, 1}
end
redis.call('PUBLISH', changed_channel, changed_message)
return {1, 0}
