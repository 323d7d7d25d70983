-- pick.lua: the deliverable tasks, in rotation order (only the scripts that dispatch
-- carry it).
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "group_state"
--- @include "rate_limit"
--- @include "rotation"

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
-- The most deliveries one run of a flow-mode queue makes (see pick()).
local RUN_DELIVERIES = 40

local function pick(n, budget, now, auto_ack)
  local cfg = flow.cfg
  -- A run's work is bounded by its cost, not only by what was asked: a delivery in
  -- flow mode is a group turn (its state, its next entries, its place in the
  -- rotation), 30-130 us of Redis against a few for a plain one, so a run delivers at
  -- most RUN_DELIVERIES and the callers look again at once (next_start() answers now
  -- while a group can deliver; a Lease loops to fill its batch). A Lease of 1,000
  -- over 100,000 groups held Redis 128 ms in one run before.
  n = math.min(n, RUN_DELIVERIES)
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
    -- Each group's weight, credit, in-flight count, head, waiting count and (with a
    -- group rate limit) limiter, at (k - 1) * per + 1..6.
    local fields, nf, per = {}, 0, group_limit and 6 or 5
    for _, group in ipairs(heads) do
      local prefix = group .. '\0'
      fields[nf + 1] = prefix .. G_WEIGHT
      fields[nf + 2] = prefix .. G_CREDIT
      fields[nf + 3] = prefix .. G_IN_FLIGHT
      fields[nf + 4] = prefix .. G_HEAD
      fields[nf + 5] = prefix .. G_WAITING
      if group_limit then
        fields[nf + 6] = prefix .. G_TAT
      end
      nf = nf + per
    end
    local states = hmget(groups, fields)
    -- Each group's plan, as if every group before it delivered all it wants: how many
    -- it wants, its next entries, whether it waits for a task not yet READY; then the
    -- metas of every candidate in one HMGET.
    local plans, candidates, entry_members, planned = {}, {}, {}, 0
    for k, group in ipairs(heads) do
      if planned >= n - #ids then
        break
      end
      local at = (k - 1) * per
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
      local skip = #group + 18
      for c = 1, math.min(#entries, math.max(want, 0)) do
        local member_text = string.sub(entries[c], skip)
        candidates[first + c] = string.sub(member_text, 17)
        entry_members[first + c] = member_text
      end
      planned = planned + math.max(want, 0)
      plans[k] = {weight = weight, credit = credit, in_flight = in_flight, head = head,
        tat = group_limit and tonumber(states[at + 6]), waiting = number_of(states[at + 5]), want = want,
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
      -- A turn's count is stored only while a group stays first with turns left: it
      -- goes when the group leaves first place (had_credit).
      local had_credit = plan.credit > 0
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
            members[#members + 1] = entry_members[plan.first + c]
            if queue_limit then
              queue_tat = limiter_take(queue_limit, queue_tat, now)
            end
            if group_limit then
              group_tat = limiter_take(group_limit, group_tat, now)
            end
          end
          looked = c
          taken[#taken + 1] = entries[c]
          gone[#gone + 1] = entry_members[plan.first + c]
        end
      end
      if delivered > 0 then
        credit = credit + delivered
        if not auto_ack then
          in_flight = in_flight + delivered
          writes[#writes + 1] = gfield(group, G_IN_FLIGHT)
          writes[#writes + 1] = int_text(in_flight)
        end
        local waiting = plan.waiting - delivered
        if waiting > 0 then
          writes[#writes + 1] = gfield(group, G_WAITING)
          writes[#writes + 1] = int_text(waiting)
        else
          drops[#drops + 1] = gfield(group, G_WAITING)
          if auto_ack then
            emptied[#emptied + 1] = group
          end
        end
        if group_limit then
          writes[#writes + 1] = gfield(group, G_TAT)
          writes[#writes + 1] = tat_text(group_tat)
          group_wait = limiter_wait(group_limit, group_tat, now)
        end
        if head then
          drops[#drops + 1] = gfield(group, G_HEAD)
        end
      end
      -- The group's place: out when it cannot deliver (back by consider() or a
      -- wake-up), at the back when its turn is used up, else still first.
      if not stop or delivered > 0 then
        local more, keeps_first = nil, false
        if head or want <= 0 then
          more = has_ready(group)
        else
          more = #entries > looked
        end
        if waits or not more then
          outs[#outs + 1] = group
        elseif group_cap > 0 and in_flight >= group_cap then
          outs[#outs + 1] = group
          wakes[#wakes + 1] = CAPPED_TEXT
          wakes[#wakes + 1] = group
          held[#held + 1] = 'group_max_in_flight'
        elseif group_wait > 0 then
          held[#held + 1] = 'group_rate_limit'
          outs[#outs + 1] = group
          wakes[#wakes + 1] = string.format('%d', math.ceil(now + group_wait))
          wakes[#wakes + 1] = group
        elseif credit >= weight or delivered == 0 then
          backs[#backs + 1] = group
        else
          -- Still first, with turns left: its count is kept.
          keeps_first = true
          writes[#writes + 1] = gfield(group, G_CREDIT)
          writes[#writes + 1] = int_text(credit)
        end
        if had_credit and not keeps_first then
          drops[#drops + 1] = gfield(group, G_CREDIT)
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
        moves[#moves + 1] = int_text(turn + k)
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
