-- dispatch.lua: lease READY tasks to Subscribe streams, one task at a time round the
-- streams (in the order given) while they have free slots, first returning expired
-- leases. A stream's free slots are its max_in_flight less the deliveries its tag
-- holds now (on any replica), so an Ack anywhere frees a slot without telling us.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] receipt prefix (random, per call), ARGV[2] the most payload bytes to
-- return (always at least one task), then 4 per stream: tag, session,
-- max_in_flight, visibility ms
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- In flow mode (include/group_state.lua) the tasks go in the rotation of groups, within the
-- queue's and groups' pause, caps and rate limits, and next_pending is when to look
-- again (next_start()).
-- Returns {now_us, next_pending, next_lease_end, held back, held_1..held_n, rows...}:
-- now_us is Redis' clock in Unix µs (the script decides by its ms); next_* are ms, -1
-- when none; held back names the limits that held back a deliverable
-- task (pick.lua's pick(), '' for none); held_i is stream i's deliveries after this
-- call; then 3 per task:
-- the stream's index (1-based), then include/push_row.lua's push_fields().
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "group_state"
--- @include "promote"
--- @include "history"
--- @include "dispatch_to"
local now, now_us = now_ms_us()
open_flow(now)
if reclaim(now) or (flow.on and promote(now)) then
  return again()
end
local out, delivered = dispatch_to(now, now_us, ARGV[1], tonumber(ARGV[2]), ARGV, 3, #ARGV)
record_history(now, delivered)
return out
