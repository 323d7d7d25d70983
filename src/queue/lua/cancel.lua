-- cancel.lua: remove tasks that are not in flight (DELAYED, READY or DEAD; and kept
-- COMPLETED or CANCELLED ones). A queue that keeps ended tasks (include/keep.lua) keeps
-- a cancelled waiting task as CANCELLED; its waiters hear of it.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, then the ids
-- Clock: Redis TIME (the dedupe window; leases that ran out end first).
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Publishes queue-changed when a cancelled task was the one a group waited for (its
-- next task may go now: the dispatchers must look again, not wait for the cancelled
-- task's due time).
-- Returns the ids removed.
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
local now = now_ms()
open_flow(now)
-- A task whose lease ran out is no longer in flight: it may be cancelled.
if reclaim(now) then
  return again()
end
local out, done, ends, freed = {}, {}, ending(), false
local keep, kept = keeping() ~= nil, 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local meta = not done[id] and load(id)
  if meta and meta.state ~= IN_FLIGHT then
    done[id] = true
    local ended = meta.state == COMPLETED or meta.state == CANCELLED
    freed = unplace(id, meta) or freed
    if keep and not ended then
      keep_ended(id, meta, CANCELLED, cancelled, now)
      if meta.dedupe_ms > 0 then
        redis.call('ZADD', reserved, string.format('%d', now + meta.dedupe_ms), id)
      end
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
