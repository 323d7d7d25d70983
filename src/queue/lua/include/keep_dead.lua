-- keep_dead.lua: how many DEAD tasks a queue keeps, and how long (QueueConfig.keep_dead,
-- the config field `keep_dead` = "<age ms> <count>", 0 for no bound of that kind; unset:
-- every DEAD task until it is redriven or cancelled). The `dead` zset is scored by when
-- each died, in µs. Pruned in bounded batches by the scripts that make tasks DEAD and
-- by every reclaim, as include/keep.lua prunes the ended tasks it keeps.
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "load"
--- @include "group_state"
--- @include "unplace"
--- @include "drop_records"
-- The most DEAD tasks one run drops beyond the ones it made DEAD.
local PRUNE_DEAD_EXTRA = 32

-- Drops DEAD tasks older than the age or beyond the count (the oldest first), at most
-- `added` + PRUNE_DEAD_EXTRA of them; nothing when the queue keeps them all.
local function prune_dead(now, added)
  local text = flow.cfg.keep_dead
  if not text then
    return
  end
  local age, count = string.match(text, '^(%d+) (%d+)$')
  age, count = tonumber(age), tonumber(count)
  local room = (added or 0) + PRUNE_DEAD_EXTRA
  local gone = {}
  if age > 0 then
    gone = redis.call('ZRANGEBYSCORE', dead, '-inf',
      string.format('(%d', (now - age) * 1000), 'LIMIT', 0, room)
  end
  if count > 0 and #gone < room then
    local over = redis.call('ZCARD', dead) - #gone - count
    if over > 0 then
      for _, entry in ipairs(redis.call('ZRANGE', dead, #gone,
          #gone + math.min(over, room - #gone) - 1)) do
        gone[#gone + 1] = entry
      end
    end
  end
  if #gone == 0 then
    return
  end
  local ids = {}
  for _, entry in ipairs(gone) do
    local id = id_of(entry)
    local meta = load(id)
    if meta then
      unplace(id, meta)
    else
      redis.call('ZREM', dead, entry)
    end
    ids[#ids + 1] = id
  end
  drop_records(ids)
end
