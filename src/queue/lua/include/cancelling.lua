-- cancelling.lua: ending a delivery that was cancelled while it ran (Cancel.running,
-- the STOPPING state). Whatever ends it (its Ack or Nack, a lease that ran out, a
-- closed stream, the re-attach grace running out) ends the task as CANCELLED: kept as
-- such when the queue keeps ended tasks (include/keep.lua), else gone; it never waits
-- again. Its history records the delivery as CANCELLED; its waiters hear of it.
--- @include "keys"
--- @include "meta"
--- @include "attempts"
--- @include "keep"
--- @include "announce"
local function end_cancelled(ends, id, meta, now)
  ends.unlease(id, meta)
  record_attempt(id, meta, now, OUT_CANCELLED)
  redis.call('HINCRBY', counters, 'o:' .. OUT_CANCELLED, 1)
  if keeping() then
    keep_ended(id, meta, CANCELLED, cancelled, now)
    prune(cancelled, now, 1)
  else
    ends.forget(id, meta, now)
  end
  announce(now, id, meta, 'cancelled')
end
