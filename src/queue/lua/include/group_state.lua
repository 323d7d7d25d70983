-- group_state.lua: flow mode and each group's state.
-- A queue is in flow mode once a task with a group or a priority was enqueued into it
-- or it was configured (config field `flow`); until then its scripts run as they
-- always did, every waiting task in pending by due time. In flow mode pending holds
-- the tasks not yet promoted; a task that is due is promoted into `ready` (its group's
-- order) and `ranked` (the queue's order), and a group that can deliver is in
-- `rotation`. A group that cannot (paused, at its cap, rate-limited, waiting for the
-- task it must deliver next, or with nothing READY) is not: no script walks the groups,
-- and the event that unblocks a group (an enqueue, a promotion, the end of a delivery,
-- its wake-up time, a resume) puts it back through consider().
-- This helper holds the script's view of flow mode (open_flow) and each group's
-- counts in `groups` (fields named by the constants below), and turns flow mode on.
--- @include "keys"
--- @include "bulk"

-- The fields of a group's state in `groups`, each `<group>\0<field>`.
-- Waiting tasks (DELAYED or READY), tasks in flight, DEAD tasks:
local G_WAITING, G_IN_FLIGHT, G_DEAD = 'n', 'f', 'x'
-- Paused ('1'), weight (deliveries per round), deliveries left in its current round:
local G_PAUSED, G_WEIGHT, G_CREDIT = 'p', 'w', 'c'
-- The task the group must deliver next (one whose delivery ended unacked, with a cap
-- of 1), and its rate limiter's theoretical arrival time:
local G_HEAD, G_TAT = 'h', 't'


-- The script's view of flow control: on (flow mode), cfg (the config hash), now.
local flow = {on = false, cfg = {}, now = 0}

-- Reads the queue's config; call once, at the top of a script, after now_ms().
local function open_flow(now)
  local flat = redis.call('HGETALL', config)
  local cfg = {}
  for i = 1, #flat, 2 do
    cfg[flat[i]] = flat[i + 1]
  end
  flow.cfg, flow.on, flow.now = cfg, cfg.flow == '1', now
end

local function number_of(text)
  if not text then
    return 0
  end
  return tonumber(text) or 0
end

-- An integer as the text a command takes: a Lua number given to redis.call is
-- formatted as a double (snprintf "%.17g"), several times dearer than "%d" (float
-- formatting was 8% of a grouped delivery's Redis instructions under callgrind).
local function int_text(n)
  return string.format('%d', n)
end

-- A group's state field.
local function gfield(group, field)
  return group .. '\0' .. field
end

-- Whether a group's fields n, f, x, p and w (its waiting, in-flight and DEAD counts, its
-- pause and its weight) say it holds no task and no config: then it leaves the group
-- index.
local function holds_nothing(n, f, x, p, w)
  return not (n or f or x or p or w)
end

local function drop_if_idle(group)
  local state = redis.call('HMGET', groups, gfield(group, G_WAITING), gfield(group, G_IN_FLIGHT),
    gfield(group, G_DEAD), gfield(group, G_PAUSED), gfield(group, G_WEIGHT))
  if holds_nothing(state[1], state[2], state[3], state[4], state[5]) then
    redis.call('ZREM', group_index, group)
  end
end

-- Counts a group's waiting tasks (field n), tasks in flight (f) or DEAD tasks (x) up
-- or down by delta. A task counts in one of the three: an Ack only ends its delivery.
local function count_group(group, field, delta)
  if delta > 0 then
    redis.call('ZADD', group_index, 0, group)
  end
  local left = redis.call('HINCRBY', groups, gfield(group, field), delta)
  if left <= 0 then
    redis.call('HDEL', groups, gfield(group, field))
    drop_if_idle(group)
  end
end

-- Counts up the waiting tasks of groups (added: group -> how many), in three commands
-- however many groups (count_group() for each was two or three).
local function count_waiting_up(added)
  local names, fields = {}, {}
  for group in pairs(added) do
    names[#names + 1] = group
    fields[#fields + 1] = gfield(group, G_WAITING)
  end
  if #names == 0 then
    return
  end
  local index, sets = {}, {}
  local counts = hmget(groups, fields)
  for k, group in ipairs(names) do
    index[2 * k - 1] = '0'
    index[2 * k] = group
    sets[2 * k - 1] = fields[k]
    sets[2 * k] = int_text(number_of(counts[k]) + added[group])
  end
  bulk('ZADD', group_index, index)
  bulk('HSET', groups, sets)
end

-- Turns flow mode on (for good: the tasks waiting in pending are promoted as due).
-- Every task there is then is ungrouped: the group '' takes over the queue's counts.
local function enter_flow()
  if flow.on then
    return
  end
  redis.call('HSET', config, 'flow', '1')
  flow.cfg.flow, flow.on = '1', true
  local waiting, leased_out, dead_tasks = redis.call('ZCARD', pending),
    redis.call('ZCARD', inflight), redis.call('ZCARD', dead)
  for field, count in pairs({n = waiting, f = leased_out, x = dead_tasks}) do
    if count > 0 then
      redis.call('HSET', groups, gfield('', field), count)
    end
  end
  if waiting + leased_out + dead_tasks > 0 then
    redis.call('ZADD', group_index, 0, '')
  end
end
