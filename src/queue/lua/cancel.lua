-- cancel.lua: remove tasks that are not in flight (DELAYED, READY or DEAD; and kept
-- COMPLETED or CANCELLED ones), and with `running` mark those in flight cancelled. A queue that keeps ended tasks (include/keep.lua) keeps
-- a cancelled waiting task as CANCELLED; its waiters hear of it.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] '1' to cancel
-- running tasks too, ARGV[4] the slot-freed channel, then the ids
-- With ARGV[3] '1', a task in flight is marked cancelled (STOPPING,
-- include/cancelling.lua): its Subscribe stream hears of it on the slot-freed channel
-- ("<tag>\0<id>\0<receipt>", which no tag is), ExtendLease answers cancelled, and the
-- delivery's end, however it comes, ends the task as CANCELLED.
-- Clock: Redis TIME (the dedupe window; leases that ran out end first).
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Publishes queue-changed when a cancelled task was the one a group waited for (its
-- next task may go now: the dispatchers must look again, not wait for the cancelled
-- task's due time).
-- Returns the ids removed (or marked cancelled).
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "member"
--- @include "load"
--- @include "reclaim"
--- @include "ending"
--- @include "group_state"
--- @include "unplace"
--- @include "keep"
--- @include "announce"
local changed_channel, changed_message = ARGV[1], ARGV[2]
local running, slot_freed_channel = ARGV[3] == '1', ARGV[4]
local now = now_ms()
open_flow(now)
-- A task whose lease ran out is no longer in flight: it may be cancelled.
if reclaim(now) then
  return again()
end
local out, done, ends, freed = {}, {}, ending(), false
local keep, kept = keeping() ~= nil, 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local meta = not done[id] and load(id)
  if meta and in_flight(meta.state) and running then
    done[id] = true
    if meta.state == IN_FLIGHT then
      meta.state = STOPPING
      store(id, meta)
      if meta.tag then
        redis.call('PUBLISH', slot_freed_channel,
          meta.tag .. '\0' .. id .. '\0' .. meta.receipt)
      end
    end
    out[#out + 1] = id
  elseif meta and not in_flight(meta.state) then
    done[id] = true
    local ended = meta.state == COMPLETED or meta.state == CANCELLED
    freed = unplace(id, meta) or freed
    if keep and not ended then
      keep_ended(id, meta, CANCELLED, cancelled, now)
      kept = kept + 1
    else
      if ended then
        redis.call('HDEL', results, id)
      end
      ends.forget(id, meta, now)
    end
    if not ended then
      announce(now, id, meta, 'cancelled')
    end
    out[#out + 1] = id
  end
end
if keep then
  prune(cancelled, now, kept)
end
ends.flush()
if freed then
  redis.call('PUBLISH', changed_channel, changed_message)
end
return out
