-- enqueue.lua: add a batch of tasks atomically, deduplicated by id.
-- KEYS[1..8] as in prelude.lua
-- ARGV[1] the queue-changed channel, ARGV[2] the message (the pending key)
-- then 7 per task: id, payload, schedule ('n' now | 'd' delay ms | 'a' due at ms),
--   schedule value, policy ('k' keep | 'r' replace), max_attempts, dedupe window ms
-- Clock: Redis TIME.
-- Returns 3 per task: created (0/1), replaced (0/1), due (Unix ms; 0 if none stored).
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
local out = {}
local changed = false
for i = 3, #ARGV, 7 do
  local id, payload, kind, value = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local policy, max, dd = ARGV[i + 4], tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  local due = now
  if kind == 'd' then
    due = now + value
  elseif kind == 'a' then
    due = value
  end
  local meta = load(id)
  if redis.call('ZSCORE', KEYS[6], id) then
    -- Held by a dedupe window: refused by both policies.
    table.insert(out, 0); table.insert(out, 0); table.insert(out, 0)
  elseif meta and (policy ~= 'r' or meta.st == 'f') then
    table.insert(out, 0); table.insert(out, 0); table.insert(out, meta.due)
  else
    local created = 1
    if meta then
      created = 0
      local old = member_of(meta, id)
      redis.call('ZREM', KEYS[1], old)
      redis.call('ZREM', KEYS[3], old)
    end
    local fresh = {seq = redis.call('INCR', KEYS[7]), due = due, enq = now, att = 0, max = max, dd = dd, st = 'p'}
    if meta then
      fresh.enq = meta.enq
    end
    store(id, fresh)
    redis.call('HSET', KEYS[5], id, payload)
    redis.call('ZADD', KEYS[1], due, member_of(fresh, id))
    changed = true
    table.insert(out, created); table.insert(out, 1 - created); table.insert(out, due)
  end
end
if changed then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return out
