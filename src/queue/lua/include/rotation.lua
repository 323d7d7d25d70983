-- rotation.lua: which groups can deliver now. A group that can is in `rotation`; one
-- that cannot (paused, at its cap, rate-limited, waiting for the task it must deliver
-- next, or with nothing READY) is not, and the event that unblocks it puts it back
-- through consider(); `wakeups` holds the groups waiting for a time or a free slot.
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "group_state"
--- @include "rate_limit"

-- A priority's band of ranked scores: 2^42 ms (until the year 2109).
local PRIORITY_BAND = 4398046511104
-- The most tasks one run promotes, and the most woken groups it looks at: a few ms.
local PROMOTE_PER_RUN = 1000
-- A wakeups score meaning "waits for one of its deliveries to end", not a time.
local CAPPED = 9007199254740991

local function clamp_due(due)
  return math.min(math.max(due, 0), PRIORITY_BAND - 1)
end

-- A task's member in `ready`.
local function ready_entry(group, priority, due, seq, id)
  return group .. '\0' .. (9 - priority) .. string.format('%015d', clamp_due(due)) .. seq
    .. ':' .. id
end

-- The pending member ("<seq>:<id>") of a `ready` entry of group.
local function member_of_entry(group, entry)
  return string.sub(entry, #group + 18)
end

-- The lex range of a group's entries in `ready` (groups hold no control characters).
local function group_range(group)
  return '[' .. group .. '\0', '(' .. group .. '\1'
end

local function rank_score(priority, due)
  return string.format('%d', (9 - priority) * PRIORITY_BAND + clamp_due(due))
end

-- The first count entries of a group in `ready`, in its order.
local function group_entries(group, count)
  local from, to = group_range(group)
  return redis.call('ZRANGEBYLEX', ready, from, to, 'LIMIT', 0, count)
end

-- Whether a group has a promoted task.
local function has_ready(group)
  return #group_entries(group, 1) > 0
end

-- Whether the task a group must deliver next is promoted (READY).
local function head_ready(id)
  local raw = redis.call('HGET', tasks, id)
  if not raw then
    return false
  end
  local seq = meta_fields(raw)
  return redis.call('ZSCORE', ranked, member(seq, id)) ~= false
end

-- Puts a group that can deliver into the rotation (at its back); leaves it out while
-- it cannot, with a wake-up when a rate limit or its cap holds it.
local function consider(group)
  if redis.call('ZSCORE', rotation, group) then
    return
  end
  local state = redis.call('HMGET', groups, gfield(group, G_PAUSED), gfield(group, G_IN_FLIGHT),
    gfield(group, G_HEAD), gfield(group, G_TAT))
  if state[1] == '1' then
    return
  end
  if state[3] then
    if not head_ready(state[3]) then
      return
    end
  elseif not has_ready(group) then
    return
  end
  local cap = number_of(flow.cfg.group_max_in_flight)
  if cap > 0 and number_of(state[2]) >= cap then
    redis.call('ZADD', wakeups, CAPPED, group)
    return
  end
  local lim = limiter(flow.cfg.group_rate)
  if lim then
    local wait = limiter_wait(lim, tonumber(state[4]), flow.now)
    if wait > 0 then
      redis.call('ZADD', wakeups, string.format('%d', math.ceil(flow.now + wait)), group)
      return
    end
  end
  redis.call('ZREM', wakeups, group)
  redis.call('ZADD', rotation, redis.call('HINCRBY', config, 'turn', 1), group)
end

-- The groups whose wake-up time came (at most PROMOTE_PER_RUN), considered again.
-- The groups waiting in wakeups with a score in from..to (at most PROMOTE_PER_RUN),
-- considered again.
local function wake(from, to)
  local woken = redis.call('ZRANGEBYSCORE', wakeups, from, to, 'LIMIT', 0, PROMOTE_PER_RUN)
  if #woken > 0 then
    bulk('ZREM', wakeups, woken)
    for _, group in ipairs(woken) do
      consider(group)
    end
  end
end

local function wake_groups(now)
  wake('-inf', now)
end
