-- ack_and_dispatch.lua: ack.lua, then dispatch.lua's leasing to the streams whose
-- slots the acks freed, in one run: an Ack on a replica whose Subscribe feed holds
-- those streams refills them without the pub/sub hop and the second round trip of a
-- dispatch (a task waiting for a slot is pushed one script sooner).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the slot-freed channel, ARGV[2] the queue-changed channel, ARGV[3] its
-- message, ARGV[4] receipt prefix (random, per call), ARGV[5] the most payload bytes to
-- return, ARGV[6] the number of streams S, then 4 per stream (tag, session,
-- max_in_flight, visibility ms), then the receipts.
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Nothing answers AGAIN (the acks are done first): when expired leases or promotion
-- have more to do than one run, the leasing is left to the feeds, told as after any
-- ack.
-- Returns {ack.lua's reply} when it leased nothing (no given stream got a slot back,
-- or the leasing was left to the feeds), else {ack.lua's reply, the 1-based indices
-- of the streams it leased to among those given, dispatch.lua's reply for those
-- streams}. Publishes as ack.lua does, but not the tags of the streams it leased to:
-- their feed learns what it needs from the reply.
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "group_state"
--- @include "promote"
--- @include "history"
--- @include "finish"
--- @include "dispatch_to"
local slot_freed_channel, changed_channel, changed_message = ARGV[1], ARGV[2], ARGV[3]
local receipt_prefix, budget, streams = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local receipts_from = 7 + 4 * streams

local now, now_us = now_ms_us()
open_flow(now)
local flags, tags, freed = finish(now, ARGV, receipts_from)
local acked = table.concat(flags)
if freed then
  redis.call('PUBLISH', changed_channel, changed_message)
end
-- The given streams that got slots back, as dispatch_to() takes them.
local chosen, refill = {}, {}
for i = 7, receipts_from - 1, 4 do
  if tags[ARGV[i]] then
    chosen[#chosen + 1] = (i - 3) / 4
    for k = 0, 3 do
      refill[#refill + 1] = ARGV[i + k]
    end
    tags[ARGV[i]] = nil
  end
end
for tag in pairs(tags) do
  redis.call('PUBLISH', slot_freed_channel, tag)
end
if #chosen == 0 then
  return {acked}
end
if reclaim(now) or (flow.on and promote(now)) then
  for k = 1, #refill, 4 do
    redis.call('PUBLISH', slot_freed_channel, refill[k])
  end
  return {acked}
end
local dispatched, delivered = dispatch_to(now, now_us, receipt_prefix, budget, refill, 1,
  #refill)
record_history(now, delivered)
return {acked, chosen, dispatched}
