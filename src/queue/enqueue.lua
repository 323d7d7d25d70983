-- enqueue.lua: add a batch of tasks atomically, deduplicated by id.
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] the queue-changed channel, ARGV[2] the message (the pending key)
-- then 7 per task: id, payload, schedule ('n' now | 'd' delay ms | 'a' due at ms),
--   schedule value, policy ('k' keep | 'r' replace | 'u' unique: a fresh random id
--   the server made, never looked up), max_attempts, dedupe window ms
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (prelude.lua reclaim()); the store runs it again.
-- Returns 3 per task: created (0/1), replaced (0/1), due (Unix ms; 0 if none stored).
-- Tasks are decided in order, as if enqueued one by one: a later task with an id
-- earlier in the batch sees that one. The writes then go out as one command per key.
local now = now_ms()
-- Scores go to ZADD as strings: converting a Lua number costs more than the ZADD.
local now_score = string.format('%d', now)
-- A task whose lease ran out is READY (or DEAD) again, even before a Lease returned
-- it: REPLACE must see it so.
if reclaim(now) then
  return again()
end
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
-- Only ids a client chose are looked up (stored task, dedupe window).
local ids, chosen = {}, {}
for i = 3, #ARGV, 7 do
  ids[#ids + 1] = ARGV[i]
  if ARGV[i + 4] ~= 'u' then
    chosen[#chosen + 1] = #ids
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
  if redis.call('ZCARD', KEYS[6]) > 0 then
    windows = redis.call('ZMSCORE', KEYS[6], unpack(lookup))
  end
  for k, n in ipairs(chosen) do
    stored[n], held[n] = metas[k], windows[k]
  end
end
-- planned[id]: what this batch stores for id, one table per task that is both the
-- new meta (encode() reads its fields) and the plan: payload, score, and `at`, its
-- place in `order` (a replace within the batch moves it to the end, as a new seq).
local planned, order, removed = {}, {}, {}
local out, no = {}, 0
for n, id in ipairs(ids) do
  local i = 3 + (n - 1) * 7
  local kind, value = ARGV[i + 2], tonumber(ARGV[i + 3])
  local due, score = now, now_score
  if kind == 'd' then
    due = now + value
    score = string.format('%d', due)
  elseif kind == 'a' then
    due = value
    score = ARGV[i + 3]
  end
  local plan = planned[id]
  local meta = plan or stored[n]
  if held[n] then
    -- Held by a dedupe window: refused by both policies.
    out[no + 1], out[no + 2], out[no + 3] = 0, 0, 0
  elseif meta and (ARGV[i + 4] ~= 'r' or meta.st == 'f') then
    out[no + 1], out[no + 2], out[no + 3] = 0, 0, meta.due
  else
    if meta and not plan then
      removed[#removed + 1] = member_of(meta, id)
    end
    order[#order + 1] = id
    planned[id] = {due = due, enq = meta and meta.enq or now, att = 0,
      max = tonumber(ARGV[i + 5]), dd = tonumber(ARGV[i + 6]), size = #ARGV[i + 1],
      st = 'p', payload = ARGV[i + 1], score = score, at = #order}
    local created = meta and 0 or 1
    out[no + 1], out[no + 2], out[no + 3] = created, 1 - created, due
  end
  no = no + 3
end
if #order > 0 then
  if #removed > 0 then
    bulk('ZREM', KEYS[1], removed)
    bulk('ZREM', KEYS[3], removed)
  end
  local seq = redis.call('INCRBY', KEYS[7], #order) - #order
  local metas, payloads, members = {}, {}, {}
  for at, id in ipairs(order) do
    local plan = planned[id]
    if plan.at == at then
      seq = seq + 1
      plan.seq = string.format('%015d', seq)
      metas[#metas + 1] = id; metas[#metas + 1] = encode(plan)
      payloads[#payloads + 1] = id; payloads[#payloads + 1] = plan.payload
      members[#members + 1] = plan.score; members[#members + 1] = member_of(plan, id)
    end
  end
  bulk('HSET', KEYS[4], metas)
  bulk('HSET', KEYS[5], payloads)
  bulk('ZADD', KEYS[1], members)
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return out
