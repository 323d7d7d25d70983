-- enqueue.lua: add a batch of tasks atomically, deduplicated by id.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] the message (the pending key), ARGV[3]
-- the values per task: 7, or 9 when some task of the batch has a group or a priority,
-- then per task: id, payload, schedule ('n' now | 'd' delay ms | 'a' due at ms),
--   schedule value, policy ('k' keep | 'r' replace | 'u' unique: a fresh random id
--   the server made, never looked up), max_attempts, dedupe window ms, and with 9:
--   priority (0-9), group ('' none). A task with a group or a priority puts the queue
--   in flow mode (include/group_state.lua); there a task due now is READY in its group at once.
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns one value, 10 bytes per task (include/pack_added.lua): created (0/1),
-- replaced (0/1), due (Unix ms; 0 if none stored).
-- Tasks are decided in order, as if enqueued one by one: a later task with an id
-- earlier in the batch sees that one. The writes then go out as one command per key.
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "group_state"
--- @include "history"
--- @include "add"
--- @include "pack_added"
local changed_channel, changed_message, stride = ARGV[1], ARGV[2], tonumber(ARGV[3])

local now = now_ms()
open_flow(now)
-- A task whose lease ran out is READY (or DEAD) again, even before a Lease returned
-- it: REPLACE must see it so.
if reclaim(now) then
  return again()
end
local out = add(ARGV, 4, stride, now, changed_channel, changed_message)
record_history(now, 0)
return pack_added(out)
