-- reclaim.lua: expired leases go back (at their original due time) or die, and kept
-- ended tasks past their retention go (include/keep.lua). Every script that looks at a
-- queue's states runs it first, so nothing after it ever sees a lease that ran out as
-- live.
--- @include "keys"
--- @include "member"
--- @include "bulk"
--- @include "load"
--- @include "ending"
--- @include "give_back"
--- @include "keep"
--- @include "keep_dead"
--- @include "group_state"
-- The most expired leases one run returns: a few ms of work, so no run blocks Redis
-- for long however many leases ran out at once. 100, not more: an expiry that ends a
-- task DEAD (its history, the DEAD set, its retention) is about 28 us of Redis; 1,000
-- in one run held Redis 11 ms and 200 5.6 ms (`bench limits`, a Lease of a queue whose
-- 100,000 leases ran out). In flow mode an expiry also moves its group's counts and
-- place (twice the commands), so half as many.
local RECLAIM_PER_RUN, RECLAIM_PER_FLOW_RUN = 100, 50

-- Returns at most RECLAIM_PER_RUN (in flow mode RECLAIM_PER_FLOW_RUN) expired leases. True when it returned that many, so
-- more may be waiting: the script then does nothing else and answers again(), and its
-- store runs it again.
local function reclaim(now)
  local per_run = flow.on and RECLAIM_PER_FLOW_RUN or RECLAIM_PER_RUN
  local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', '0',
    int_text(per_run))
  local ends, orphans = ending(), {}
  for _, entry in ipairs(expired) do
    local id = id_of(entry)
    local meta = load(id)
    if meta then
      expire_delivery(ends, id, meta, now)
    else
      orphans[#orphans + 1] = entry
    end
  end
  ends.flush()
  if #orphans > 0 then
    bulk('ZREM', inflight, orphans)
  end
  -- Kept tasks past their age go even on a queue where nothing ends any more.
  if keeping() then
    prune(completed, now, 0)
    prune(cancelled, now, 0)
  end
  prune_dead(now, 0)
  return #expired == per_run
end

-- The answer of a script that only returned expired leases this run.
local function again()
  return redis.status_reply('AGAIN')
end
