-- ack.lua: finish deliveries by receipt; a stale receipt changes nothing.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the slot-freed channel, ARGV[2] the queue-changed channel, ARGV[3] its
-- message, ARGV[4] how many results follow (k), then k receipt-result pairs (what a
-- delivery returned), then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns one value, a byte '0' or '1' per receipt; publishes each Subscribe tag that
-- got slots back, once per call, and (flow mode, a cap set) that the queue may deliver
-- again.
--- @include "keys"
--- @include "now_ms"
--- @include "group_state"
--- @include "finish"
local slot_freed_channel, changed_channel, changed_message = ARGV[1], ARGV[2], ARGV[3]

local now = now_ms()
open_flow(now)
local given = tonumber(ARGV[4])
local returned
if given > 0 then
  returned = {}
  for i = 5, 4 + 2 * given, 2 do
    returned[ARGV[i]] = ARGV[i + 1]
  end
end
local out, tags, freed = finish(now, ARGV, 5 + 2 * given, returned)
if freed then
  redis.call('PUBLISH', changed_channel, changed_message)
end
for tag in pairs(tags) do
  redis.call('PUBLISH', slot_freed_channel, tag)
end
return table.concat(out)
