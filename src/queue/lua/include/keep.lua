-- keep.lua: the ended tasks a queue keeps (QueueConfig.keep_completed, the config
-- field `keep_completed` = "<age ms> <count>", 0 for no bound of that kind): an acked
-- task stays as COMPLETED in `completed`, a cancelled one as CANCELLED in `cancelled`,
-- each zset scored by when it ended (Unix µs), with its payload, history and result. Kept
-- tasks count in no depth. Pruning runs in the scripts that end tasks, and in every
-- reclaim (so age bounds hold on a queue nothing ends on), a bounded batch each time.
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "load"
--- @include "group_state"
--- @include "drop_records"
-- The most kept tasks one run drops beyond the ones its own ends added: enough to
-- catch up with a bound that was lowered, a few at a time.
local PRUNE_EXTRA = 32

-- The retention: age ms and count (nil when the queue keeps nothing).
local function keeping()
  local text = flow.cfg.keep_completed
  if not text then
    return nil
  end
  local age, count = string.match(text, '^(%d+) (%d+)$')
  return tonumber(age), tonumber(count)
end

-- Keeps a task whose delivery (or waiting) ended at `now` as `state` (COMPLETED or
-- CANCELLED) in `zset`; its id is reserved for its dedupe window from now, as a task
-- that is gone would be.
local function keep_ended(id, meta, state, zset, now)
  if meta.dedupe_ms > 0 then
    redis.call('ZADD', reserved, string.format('%d', now + meta.dedupe_ms), id)
  end
  meta.state = state
  meta.receipt = nil
  meta.lease_end = nil
  meta.tag = nil
  meta.session = nil
  store(id, meta)
  -- Scored by when it ended, in µs (include/now_ms.lua).
  redis.call('ZADD', zset, string.format('%d', script_us), member_of(meta, id))
end

-- Drops kept tasks of `zset` that are older than the age or beyond the count, at most
-- `added` + PRUNE_EXTRA of them (`added`: how many this run kept there).
local function prune(zset, now, added)
  local age, count = keeping()
  local room = (added or 0) + PRUNE_EXTRA
  local gone = {}
  if age and age > 0 then
    gone = redis.call('ZRANGEBYSCORE', zset, '-inf', string.format('(%d', (now - age) * 1000),
      'LIMIT', 0, room)
  end
  if count and count > 0 and #gone < room then
    local over = redis.call('ZCARD', zset) - #gone - count
    if over > 0 then
      local more = redis.call('ZRANGE', zset, #gone, #gone + math.min(over, room - #gone) - 1)
      for _, entry in ipairs(more) do
        gone[#gone + 1] = entry
      end
    end
  end
  if #gone == 0 then
    return
  end
  bulk('ZREM', zset, gone)
  local ids = {}
  for n, entry in ipairs(gone) do
    ids[n] = id_of(entry)
  end
  drop_records(ids)
end
