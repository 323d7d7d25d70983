-- ack.lua: finish deliveries by receipt; a stale receipt changes nothing.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the slot-freed channel, ARGV[2] the queue-changed channel, ARGV[3] its
-- message, then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns one 0/1 per receipt; publishes each Subscribe tag that got slots back,
-- once per call, and (flow mode, a cap set) that the queue may deliver again.
--- @include "keys"
--- @include "now_ms"
--- @include "group_state"
--- @include "finish"
local slot_freed_channel, changed_channel, changed_message = ARGV[1], ARGV[2], ARGV[3]

local now = now_ms()
open_flow(now)
local out, tags, freed = finish(now, ARGV, 4)
if freed then
  redis.call('PUBLISH', changed_channel, changed_message)
end
for tag in pairs(tags) do
  redis.call('PUBLISH', slot_freed_channel, tag)
end
return out
