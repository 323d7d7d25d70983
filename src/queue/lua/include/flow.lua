-- flow.lua: flow control (groups, priorities, pause, caps, rate limits).
-- A queue is in flow mode once a task with a group or a priority was enqueued into it
-- or it was configured (config field `flow`); until then its scripts run as they
-- always did, every waiting task in pending by due time. In flow mode pending holds
-- the tasks not yet promoted; a task that is due is promoted into `ready` (its group's
-- order) and `ranked` (the queue's order), and a group that can deliver is in
-- `rotation`. A group that cannot (paused, at its cap, rate-limited, waiting for the
-- task it must deliver next, or with nothing READY) is not: no script walks the groups,
-- and the event that unblocks a group (an enqueue, a promotion, the end of a delivery,
-- its wake-up time, a resume) puts it back through consider().
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "first_score"

-- A priority's band of ranked scores: 2^42 ms (until the year 2109).
local PRIORITY_BAND = 4398046511104
-- The most tasks one run promotes, and the most woken groups it looks at: a few ms.
local PROMOTE_PER_RUN = 1000
-- A wakeups score meaning "waits for one of its deliveries to end", not a time.
local CAPPED = 9007199254740991

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
  return tonumber(text or '0') or 0
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
  local state = redis.call('HMGET', groups, gfield(group, 'n'), gfield(group, 'f'),
    gfield(group, 'x'), gfield(group, 'p'), gfield(group, 'w'))
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

-- A RateLimit as stored ("limit period_ms burst"), as GCRA's emission interval and
-- tolerance (ms), or nil for none.
local function limiter(text)
  if not text then
    return nil
  end
  local limit, period, burst = string.match(text, '^(%d+) (%d+) (%d+)$')
  limit, period, burst = tonumber(limit), tonumber(period), tonumber(burst)
  if not limit or limit == 0 then
    return nil
  end
  local interval = period / limit
  return {interval = interval, tolerance = (burst - 1) * interval}
end

-- How long (ms) until the limiter lets one more delivery start; 0: now. tat is its
-- theoretical arrival time (nil: never used).
local function limiter_wait(lim, tat, now)
  local at = math.max(tat or now, now)
  return math.max(at - now - lim.tolerance, 0)
end

-- The limiter's tat after one more start now.
local function limiter_take(lim, tat, now)
  return math.max(tat or now, now) + lim.interval
end

local function tat_text(tat)
  return string.format('%.4f', tat)
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
  local state = redis.call('HMGET', groups, gfield(group, 'p'), gfield(group, 'f'),
    gfield(group, 'h'), gfield(group, 't'))
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

-- Collects READY tasks to be placed in `ready` and `ranked`; place() sends them and
-- considers their groups, in the order their first tasks came (so groups new to the
-- rotation join it in that order).
local function readying()
  local entries, ranks, touched, order = {}, {}, {}, {}
  local r = {}
  function r.add(id, seq, priority, due, group)
    entries[#entries + 1] = '0'
    entries[#entries + 1] = ready_entry(group, priority, due, seq, id)
    ranks[#ranks + 1] = rank_score(priority, due)
    ranks[#ranks + 1] = member(seq, id)
    if not touched[group] then
      touched[group] = true
      order[#order + 1] = group
    end
  end
  function r.place()
    if #entries > 0 then
      bulk('ZADD', ready, entries)
      bulk('ZADD', ranked, ranks)
      for _, group in ipairs(order) do
        consider(group)
      end
    end
  end
  return r
end

-- Promotes due tasks from pending (at most PROMOTE_PER_RUN). True when it promoted
-- that many: more may be due, and the script answers again().
local function promote(now)
  local due = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0, PROMOTE_PER_RUN)
  if #due == 0 then
    return false
  end
  local ids = {}
  for n, entry in ipairs(due) do
    ids[n] = id_of(entry)
  end
  local raws = hmget(tasks, ids)
  local r = readying()
  for n, id in ipairs(ids) do
    if raws[n] then
      local seq, due_at, _, _, _, _, _, _, _, _, _, _, priority, group = meta_fields(raws[n])
      r.add(id, seq, priority, due_at, group)
    end
  end
  redis.call('ZREMRANGEBYRANK', pending, 0, #due - 1)
  r.place()
  return #due == PROMOTE_PER_RUN
end

-- Puts a task that waits again (given back, redriven) where it waits: in flow mode a
-- due one is READY at once, in its group's order.
local function wait_again(id, meta)
  if flow.on and meta.due <= flow.now then
    local r = readying()
    r.add(id, meta.seq, meta.priority, meta.due, meta.group)
    r.place()
  else
    redis.call('ZADD', pending, string.format('%d', meta.due), member_of(meta, id))
  end
end

-- Removes a waiting (not in flight) task from wherever it waits; its group is
-- considered again when it was the task the group had to deliver next. True then:
-- the caller tells the dispatchers (the group's next task may go now).
local function unplace(id, meta)
  local entry = member_of(meta, id)
  redis.call('ZREM', pending, entry)
  redis.call('ZREM', dead, entry)
  if flow.on then
    count_group(meta.group, meta.state == DEAD and 'x' or 'n', -1)
    redis.call('ZREM', ranked, entry)
    redis.call('ZREM', ready,
      ready_entry(meta.group, meta.priority, meta.due, meta.seq, id))
    local head = gfield(meta.group, 'h')
    if redis.call('HGET', groups, head) == id then
      redis.call('HDEL', groups, head)
      consider(meta.group)
      return true
    end
  end
  return false
end

-- Flow mode: records ended deliveries of groups (group -> count, and the groups in
-- order): their in-flight counts drop, and with a group cap the groups are considered
-- again in that order (without one, a delivery's end changes no group's place). True
-- when a cap was set, so that the script tells the queue's dispatchers a slot is free.
-- The groups' counts are read in one HMGET and written in one command per kind, not a
-- few commands per group (an Ack of a batch spread over many groups is one run).
local function deliveries_ended(ended, order)
  local fields = {}
  for _, group in ipairs(order) do
    fields[#fields + 1] = gfield(group, 'f')
    fields[#fields + 1] = gfield(group, 'n')
    fields[#fields + 1] = gfield(group, 'x')
    fields[#fields + 1] = gfield(group, 'p')
    fields[#fields + 1] = gfield(group, 'w')
  end
  local states = hmget(groups, fields)
  local sets, dels, idle = {}, {}, {}
  for k, group in ipairs(order) do
    local at = (k - 1) * 5
    local left = number_of(states[at + 1]) - ended[group]
    if left > 0 then
      sets[#sets + 1] = fields[at + 1]
      sets[#sets + 1] = left
    else
      dels[#dels + 1] = fields[at + 1]
      if holds_nothing(states[at + 2], false, states[at + 3], states[at + 4], states[at + 5]) then
        idle[#idle + 1] = group
      end
    end
  end
  -- bulk() sends nothing for an empty list.
  bulk('HSET', groups, sets)
  bulk('HDEL', groups, dels)
  bulk('ZREM', group_index, idle)
  if number_of(flow.cfg.group_max_in_flight) > 0 then
    for _, group in ipairs(order) do
      consider(group)
    end
  end
  return number_of(flow.cfg.max_in_flight) > 0 or number_of(flow.cfg.group_max_in_flight) > 0
end

-- Picks up to n deliverable tasks in rotation order whose payloads fit in budget bytes
-- (the first always does), and takes them out of ready/ranked; their groups' turns,
-- in-flight counts (unless auto_ack) and limiters advance. Returns the pending members
-- taken, their ids and packed metas, the Redis-clock ms at which the queue's rate
-- limit lets the next delivery start if it stopped there (else nil), and the limits
-- that held back a deliverable task (a comma-separated list of their names, once per
-- queue limit and once per group held).
-- The rotation is read a run of groups at a time (as many as deliveries are still
-- wanted), their states in one HMGET, and the writes of a run go out together: a
-- delivery costs about one command of its own however many groups there are.
local function pick(n, budget, now, auto_ack)
  local cfg = flow.cfg
  local members, ids, raws, held = {}, {}, {}, {}
  if cfg.paused == '1' then
    if redis.call('ZCARD', rotation) > 0 then
      held[1] = 'paused'
    end
    return members, ids, raws, nil, table.concat(held, ',')
  end
  local cap, wanted = number_of(cfg.max_in_flight), n
  if cap > 0 and not auto_ack then
    n = math.min(n, cap - redis.call('ZCARD', inflight))
  end
  local queue_limit, queue_tat = limiter(cfg.rate), tonumber(cfg.tat)
  local group_limit = limiter(cfg.group_rate)
  local group_cap = number_of(cfg.group_max_in_flight)
  local used, retry_at, stop = 0, nil, false
  local runs = 10
  while #ids < n and not stop and runs > 0 do
    runs = runs - 1
    local heads = redis.call('ZRANGE', rotation, 0, n - #ids - 1)
    if #heads == 0 then
      break
    end
    local alone = #heads == 1 and redis.call('ZCARD', rotation) == 1
    local fields = {}
    for _, group in ipairs(heads) do
      for _, field in ipairs({'w', 'c', 'f', 'h', 't', 'n'}) do
        fields[#fields + 1] = gfield(group, field)
      end
    end
    local states = hmget(groups, fields)
    -- Each group's plan, as if every group before it delivered all it wants: how many
    -- it wants, its next entries, whether it waits for a task not yet READY; then the
    -- metas of every candidate in one HMGET.
    local plans, candidates, planned = {}, {}, 0
    for k, group in ipairs(heads) do
      if planned >= n - #ids then
        break
      end
      local at = (k - 1) * 6
      local weight, credit, in_flight = number_of(states[at + 1]), number_of(states[at + 2]),
        number_of(states[at + 3])
      local head = states[at + 4]
      if weight == 0 then
        weight = 1
      end
      local want = n - #ids - planned
      if not alone then
        want = math.min(want, weight - credit)
      end
      if group_cap > 0 then
        want = math.min(want, group_cap - in_flight)
      end
      local entries, waits = {}, false
      if head then
        -- It must deliver this task next: only that one, once it is promoted.
        waits = not head_ready(head)
        if not waits and want > 0 then
          local seq, due_at, _, _, _, _, _, _, _, _, _, _, priority =
            meta_fields(redis.call('HGET', tasks, head))
          entries[1] = ready_entry(group, priority, due_at, seq, head)
        end
      elseif want > 0 then
        -- One more than wanted: whether any is left after this turn.
        entries = group_entries(group, want + 1)
      end
      local first = #candidates
      for c = 1, math.min(#entries, math.max(want, 0)) do
        candidates[#candidates + 1] = id_of(member_of_entry(group, entries[c]))
      end
      planned = planned + math.max(want, 0)
      plans[k] = {weight = weight, credit = credit, in_flight = in_flight, head = head,
        tat = tonumber(states[at + 5]), waiting = number_of(states[at + 6]), want = want,
        entries = entries, waits = waits, first = first}
    end
    local metas = hmget(tasks, candidates)
    -- This run's writes: entries taken out, group fields, groups out of the rotation,
    -- groups to its back (in visiting order), wake-ups.
    local taken, gone, writes, drops, outs, backs, wakes = {}, {}, {}, {}, {}, {}, {}
    -- Groups an auto_ack run left with no task at all.
    local emptied = {}
    for k, group in ipairs(heads) do
      local plan = plans[k]
      if #ids >= n or stop or not plan then
        break
      end
      local weight, credit, in_flight, head = plan.weight, plan.credit, plan.in_flight, plan.head
      -- A turn's count is stored only while a group stays first with turns left.
      local function drop_credit()
        if plan.credit > 0 then
          drops[#drops + 1] = gfield(group, 'c')
        end
      end
      local group_tat, want, entries, waits = plan.tat, plan.want, plan.entries, plan.waits
      local delivered, looked, group_wait = 0, 0, 0
      if #entries > 0 and want > 0 then
        for c = 1, math.min(#entries, want) do
          local id = candidates[plan.first + c]
          if queue_limit and limiter_wait(queue_limit, queue_tat, now) > 0 then
            retry_at = now + limiter_wait(queue_limit, queue_tat, now)
            stop = true
            break
          end
          if group_limit then
            group_wait = limiter_wait(group_limit, group_tat, now)
            if group_wait > 0 then
              break
            end
          end
          local raw = metas[plan.first + c]
          if raw then
            used = used + size_of(raw) + #id + 128
            if #ids > 0 and used > budget then
              stop = true
              break
            end
            delivered = delivered + 1
            ids[#ids + 1] = id
            raws[#raws + 1] = raw
            members[#members + 1] = member_of_entry(group, entries[c])
            if queue_limit then
              queue_tat = limiter_take(queue_limit, queue_tat, now)
            end
            if group_limit then
              group_tat = limiter_take(group_limit, group_tat, now)
            end
          end
          looked = c
          taken[#taken + 1] = entries[c]
          gone[#gone + 1] = member_of_entry(group, entries[c])
        end
      end
      if delivered > 0 then
        credit = credit + delivered
        if not auto_ack then
          in_flight = in_flight + delivered
          writes[#writes + 1] = gfield(group, 'f')
          writes[#writes + 1] = in_flight
        end
        local waiting = plan.waiting - delivered
        if waiting > 0 then
          writes[#writes + 1] = gfield(group, 'n')
          writes[#writes + 1] = waiting
        else
          drops[#drops + 1] = gfield(group, 'n')
          if auto_ack then
            emptied[#emptied + 1] = group
          end
        end
        if group_limit then
          writes[#writes + 1] = gfield(group, 't')
          writes[#writes + 1] = tat_text(group_tat)
          group_wait = limiter_wait(group_limit, group_tat, now)
        end
        if head then
          drops[#drops + 1] = gfield(group, 'h')
        end
      end
      -- The group's place: out when it cannot deliver (back by consider() or a
      -- wake-up), at the back when its turn is used up, else still first.
      if not stop or delivered > 0 then
        local more
        if head or want <= 0 then
          more = has_ready(group)
        else
          more = #entries > looked
        end
        if waits or not more then
          outs[#outs + 1] = group
          drop_credit()
        elseif group_cap > 0 and in_flight >= group_cap then
          outs[#outs + 1] = group
          drop_credit()
          wakes[#wakes + 1] = CAPPED
          wakes[#wakes + 1] = group
          held[#held + 1] = 'group_max_in_flight'
        elseif group_wait > 0 then
          held[#held + 1] = 'group_rate_limit'
          outs[#outs + 1] = group
          drop_credit()
          wakes[#wakes + 1] = string.format('%d', math.ceil(now + group_wait))
          wakes[#wakes + 1] = group
        elseif credit >= weight or delivered == 0 then
          drop_credit()
          backs[#backs + 1] = group
        elseif delivered > 0 then
          writes[#writes + 1] = gfield(group, 'c')
          writes[#writes + 1] = credit
        end
      end
    end
    if #taken > 0 then
      bulk('ZREM', ready, taken)
      bulk('ZREM', ranked, gone)
    end
    if #drops > 0 then
      bulk('HDEL', groups, drops)
    end
    if #writes > 0 then
      bulk('HSET', groups, writes)
    end
    if #outs > 0 then
      bulk('ZREM', rotation, outs)
    end
    if #wakes > 0 then
      bulk('ZADD', wakeups, wakes)
    end
    for _, group in ipairs(emptied) do
      drop_if_idle(group)
    end
    if #backs > 0 then
      local turn = redis.call('HINCRBY', config, 'turn', #backs) - #backs
      local moves = {}
      for k, group in ipairs(backs) do
        moves[#moves + 1] = turn + k
        moves[#moves + 1] = group
      end
      bulk('ZADD', rotation, moves)
    end
  end
  if queue_limit and queue_tat then
    redis.call('HSET', config, 'tat', tat_text(queue_tat))
  end
  if retry_at then
    held[#held + 1] = 'rate_limit'
  end
  if n < wanted and #ids == n and redis.call('ZCARD', rotation) > 0 then
    held[#held + 1] = 'max_in_flight'
  end
  return members, ids, raws, retry_at, table.concat(held, ',')
end

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
