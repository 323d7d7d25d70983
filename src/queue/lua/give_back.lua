-- give_back.lua: deliveries whose caller never received them (a long-poll Lease whose
-- caller left while its tasks were being taken) go back at their original due time,
-- as a lease expiry would, or die on their last attempt: the delivery counts. A stale
-- receipt (expired, redelivered, acked) is skipped.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns how many went back to pending.
--- @include "now_ms"
--- @include "delivery"
--- @include "ending"
--- @include "give_back"
--- @include "group_state"
local changed_channel, changed_message = ARGV[1], ARGV[2]

local now = now_ms()
open_flow(now)
local returned, ends = 0, ending()
for i = 3, #ARGV do
  local id, meta = delivery(ARGV[i], now)
  if id and expire_delivery(ends, id, meta, now) then
    returned = returned + 1
  end
end
if ends.flush() or returned > 0 then
  redis.call('PUBLISH', changed_channel, changed_message)
end
return returned
