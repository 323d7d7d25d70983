-- add.lua: stores a batch of tasks atomically, deduplicated by id: the body of
-- enqueue.lua, shared with fire.lua (a schedule's fire is one enqueue).
-- `args` holds the tasks from `first` on, `stride` values each (enqueue.lua's header
-- says what they are); `now` is Redis TIME in ms, already run through open_flow and
-- reclaim. Publishes queue-changed (`channel`, `message`) when a task was stored,
-- unless `channel` is nil (the caller publishes).
-- Returns 3 values per task: created (0/1), replaced (0/1), due (Unix ms; 0 if none).
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "load"
--- @include "group_state"
--- @include "promote"
--- @include "unplace"
local function add(args, first, stride, now, channel, message)
  -- Scores go to ZADD as strings: converting a Lua number costs more than the ZADD.
  local now_score = string.format('%d', now)
  -- Dedupe windows that ended go, at most WINDOWS_PER_RUN a run: 100,000 windows ending
  -- together made one ZREMRANGEBYSCORE hold Redis for about 30 ms. The rest go in later
  -- runs; until then an ended window holds nothing (its end is compared with now below).
  local WINDOWS_PER_RUN = 1000
  local ended = redis.call('ZRANGEBYSCORE', reserved, '-inf', now, 'LIMIT', 0, WINDOWS_PER_RUN)
  if #ended > 0 then
    bulk('ZREM', reserved, ended)
  end
  -- Only ids a client chose are looked up (stored task, dedupe window).
  local ids, chosen = {}, {}
  for i = first, #args, stride do
    ids[#ids + 1] = args[i]
    if args[i + 4] ~= 'u' then
      chosen[#chosen + 1] = #ids
    end
    if stride == 9 and (args[i + 7] ~= '0' or args[i + 8] ~= '') then
      enter_flow()
    end
  end
  local stored, held = {}, {}
  if #chosen > 0 then
    local lookup = {}
    for k, n in ipairs(chosen) do
      lookup[k] = ids[n]
    end
    local metas = load_many(lookup)
    local windows = {}
    if redis.call('ZCARD', reserved) > 0 then
      windows = redis.call('ZMSCORE', reserved, unpack(lookup))
    end
    for k, n in ipairs(chosen) do
      stored[n], held[n] = metas[k], windows[k] and tonumber(windows[k]) > now
    end
  end
  -- planned[id]: what this batch stores for id, one table per task that is both the
  -- new meta (encode() reads its fields) and the plan: payload, score, and `at`, its
  -- place in `order` (a replace within the batch moves it to the end, as a new seq).
  local planned, order, removed = {}, {}, {}
  local out, no = {}, 0
  for n, id in ipairs(ids) do
    local i = first + (n - 1) * stride
    local kind, value = args[i + 2], tonumber(args[i + 3])
    local due, score = now, now_score
    if kind == 'd' then
      due = now + value
      score = string.format('%d', due)
    elseif kind == 'a' then
      due = value
      score = args[i + 3]
    end
    local plan = planned[id]
    local meta = plan or stored[n]
    if held[n] then
      -- Held by a dedupe window: refused by both policies.
      out[no + 1], out[no + 2], out[no + 3] = 0, 0, 0
    elseif meta and (args[i + 4] ~= 'r' or in_flight(meta.state)) then
      out[no + 1], out[no + 2], out[no + 3] = 0, 0, meta.due
    else
      if meta and not plan then
        removed[#removed + 1] = {id, meta}
      end
      order[#order + 1] = id
      planned[id] = {due = due, enqueued_at = meta and meta.enqueued_at or now, attempt = 0,
        max_attempts = tonumber(args[i + 5]), dedupe_ms = tonumber(args[i + 6]),
        size = #args[i + 1], state = PENDING, payload = args[i + 1], score = score, at = #order,
        priority = stride == 9 and tonumber(args[i + 7]) or 0,
        group = stride == 9 and args[i + 8] or ''}
      local created = meta and 0 or 1
      out[no + 1], out[no + 2], out[no + 3] = created, 1 - created, due
    end
    no = no + 3
  end
  if #order > 0 then
    for _, old in ipairs(removed) do
      unplace(old[1], old[2])
      -- A replaced task is a new one: the old one's error does not follow it.
      redis.call('HDEL', errors, old[1])
      redis.call('HDEL', progress, old[1])
      redis.call('HDEL', attempts, old[1])
      redis.call('HDEL', results, old[1])
    end
    local seq = redis.call('INCRBY', enqueue_seq, #order) - #order
    local metas, bodies, members, r, added = {}, {}, {}, readying(), {}
    for at, id in ipairs(order) do
      local plan = planned[id]
      if plan.at == at then
        seq = seq + 1
        plan.seq = string.format('%015d', seq)
        metas[#metas + 1] = id; metas[#metas + 1] = encode(plan)
        bodies[#bodies + 1] = id; bodies[#bodies + 1] = plan.payload
        if flow.on then
          added[plan.group] = (added[plan.group] or 0) + 1
        end
        if flow.on and plan.due <= now then
          r.add(id, plan.seq, plan.priority, plan.due, plan.group)
        else
          members[#members + 1] = plan.score; members[#members + 1] = member_of(plan, id)
        end
      end
    end
    bulk('HSET', tasks, metas)
    bulk('HSET', payloads, bodies)
    if #members > 0 then
      bulk('ZADD', pending, members)
    end
    count_waiting_up(added)
    r.place()
    if channel then
      redis.call('PUBLISH', channel, message)
    end
  end
  return out
end
