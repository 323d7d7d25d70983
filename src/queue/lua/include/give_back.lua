-- give_back.lua: a delivery that ended without an ack goes back to pending, or dies
-- on its last attempt.
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "member"
--- @include "load"
--- @include "group_state"
--- @include "wait_again"
--- @include "attempts"
--- @include "announce"
--- @include "cancelling"
--- @include "keep_dead"
-- Back to pending at `due`, or DEAD when out of attempts or `dead_now` (counted in the
-- dead-letter counter), the delivery recorded in its history as ending at `now` with
-- `outcome` and `failure` (nil: none). The caller ended its lease (ending().unlease).
-- Returns the new state; a DEAD task's waiters hear of it. With group_max_in_flight 1 its group delivers it again before
-- any other of its tasks.
local function give_back(id, meta, due, dead_now, now, outcome, failure)
  record_attempt(id, meta, now, outcome, failure)
  redis.call('HINCRBY', counters, 'o:' .. outcome, 1)
  meta.receipt = nil
  meta.lease_end = nil
  meta.tag = nil
  meta.session = nil
  if dead_now or meta.attempt >= meta.max_attempts then
    meta.state = DEAD
    -- Scored by when it died, in µs (include/now_ms.lua): ListTasks and the dashboard
    -- list DEAD tasks in that order.
    redis.call('ZADD', dead, string.format('%d', script_us), member_of(meta, id))
    redis.call('HINCRBY', counters, 'dead', 1)
    if flow.on then
      count_group(meta.group, G_DEAD, 1)
    end
  else
    meta.state = PENDING
    meta.due = due
    if flow.on then
      count_group(meta.group, G_WAITING, 1)
      if number_of(flow.cfg.group_max_in_flight) == 1 then
        redis.call('HSET', groups, gfield(meta.group, G_HEAD), id)
      end
    end
    store(id, meta)
    wait_again(id, meta)
    return meta.state
  end
  store(id, meta)
  announce(now, id, meta, 'dead')
  prune_dead(now, 1)
  return meta.state
end

-- As a lease expiry (or a closed stream) ends a delivery at `now`: its lease records
-- go (through ends), and the task is back at its original due time, or dead on its
-- last attempt (a delivery cancelled while it ran ends the task as CANCELLED). True
-- when it went back to pending.
local function expire_delivery(ends, id, meta, now)
  if meta.state == STOPPING then
    end_cancelled(ends, id, meta, now)
    return false
  end
  ends.unlease(id, meta)
  return give_back(id, meta, meta.due, false, now, OUT_EXPIRED) == PENDING
end
