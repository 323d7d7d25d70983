-- next_start.lua: when the queue's dispatchers should look again.
--- @include "keys"
--- @include "first_score"
--- @include "group_state"
--- @include "rotation"

-- When to look again for deliverable tasks (Redis-clock ms; -1: only when told):
-- never while paused or at the queue's cap; else the earliest of the first task to
-- fall due, the first group wake-up, the queue's rate limit (retry_at), and now when
-- a group can still deliver.
local function next_start(now, retry_at)
  local cfg = flow.cfg
  if cfg.paused == '1' then
    return -1
  end
  local cap = number_of(cfg.max_in_flight)
  if cap > 0 and redis.call('ZCARD', inflight) >= cap then
    return -1
  end
  local next = first_score(pending)
  local woken = first_score(wakeups)
  if woken >= 0 and woken < CAPPED and (next < 0 or woken < next) then
    next = woken
  end
  local soon = retry_at
  if not soon and redis.call('ZCARD', rotation) > 0 then
    soon = now
  end
  if soon then
    soon = math.ceil(soon)
    if next < 0 or soon < next then
      next = soon
    end
  end
  return next
end
