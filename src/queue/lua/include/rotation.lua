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
-- A wakeups score meaning "waits for one of its deliveries to end", not a time (and
-- as a command's argument).
local CAPPED = 9007199254740991
local CAPPED_TEXT = string.format('%d', CAPPED)

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
  return redis.call('ZRANGEBYLEX', ready, from, to, 'LIMIT', '0', int_text(count))
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

-- Puts the groups of `list` that can deliver into the rotation (at its back, in list
-- order, each once); leaves out those that cannot, with a wake-up when a rate limit or
-- the cap holds them. `ready_known`: each group of the list has just had a task made
-- READY (an enqueue's or a promotion's), so none is looked up for one.
-- A few commands for the whole list, not a few per group: with 1,000 groups each
-- enqueued into once, a group's five commands here (and their arguments' conversions)
-- were most of the enqueue's Redis time.
local function consider_all(list, ready_known)
  local order, seen = {}, {}
  for _, group in ipairs(list) do
    if not seen[group] then
      seen[group] = true
      order[#order + 1] = group
    end
  end
  if #order == 0 then
    return
  end
  local placed = zmscore(rotation, order)
  local outside, fields = {}, {}
  for k, group in ipairs(order) do
    if not placed[k] then
      outside[#outside + 1] = group
      local prefix = group .. '\0'
      local at = #fields
      fields[at + 1] = prefix .. G_PAUSED
      fields[at + 2] = prefix .. G_IN_FLIGHT
      fields[at + 3] = prefix .. G_HEAD
      fields[at + 4] = prefix .. G_TAT
    end
  end
  if #outside == 0 then
    return
  end
  local states = hmget(groups, fields)
  local cap = number_of(flow.cfg.group_max_in_flight)
  local lim = limiter(flow.cfg.group_rate)
  local wakes, joining = {}, {}
  for k, group in ipairs(outside) do
    local at = (k - 1) * 4
    local head = states[at + 3]
    local can = states[at + 1] ~= '1'
    if can and head then
      can = head_ready(head)
    elseif can and not ready_known then
      can = has_ready(group)
    end
    if can then
      local wait = 0
      if lim then
        wait = limiter_wait(lim, tonumber(states[at + 4]), flow.now)
      end
      if cap > 0 and number_of(states[at + 2]) >= cap then
        wakes[#wakes + 1] = CAPPED_TEXT
        wakes[#wakes + 1] = group
      elseif wait > 0 then
        wakes[#wakes + 1] = string.format('%d', math.ceil(flow.now + wait))
        wakes[#wakes + 1] = group
      else
        joining[#joining + 1] = group
      end
    end
  end
  bulk('ZADD', wakeups, wakes)
  if #joining > 0 then
    bulk('ZREM', wakeups, joining)
    local turn = redis.call('HINCRBY', config, 'turn', #joining) - #joining
    local moves = {}
    for k, group in ipairs(joining) do
      moves[2 * k - 1] = int_text(turn + k)
      moves[2 * k] = group
    end
    bulk('ZADD', rotation, moves)
  end
end

-- consider_all() for one group.
local function consider(group)
  consider_all({group}, false)
end

-- The groups whose wake-up time came (at most PROMOTE_PER_RUN), considered again.
-- The groups waiting in wakeups with a score in from..to (at most PROMOTE_PER_RUN),
-- considered again.
local function wake(from, to)
  local woken = redis.call('ZRANGEBYSCORE', wakeups, from, to, 'LIMIT', 0, PROMOTE_PER_RUN)
  if #woken > 0 then
    bulk('ZREM', wakeups, woken)
    consider_all(woken, false)
  end
end

local function wake_groups(now)
  wake('-inf', now)
end
