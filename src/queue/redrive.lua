-- redrive.lua: move DEAD tasks back to READY with their attempts reset.
-- KEYS[1..8] as in prelude.lua
-- ARGV[1] the queue-changed channel, ARGV[2] its message, then the ids (none: all DEAD)
-- No clock: a dead task's due time is in the past, so it is READY at once.
-- Returns how many tasks moved.
local ids = {}
if #ARGV > 2 then
  for i = 3, #ARGV do
    table.insert(ids, ARGV[i])
  end
else
  for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    table.insert(ids, id_of(member))
  end
end
local moved = 0
for _, id in ipairs(ids) do
  local meta = load(id)
  if meta and meta.st == 'd' then
    local member = member_of(meta, id)
    redis.call('ZREM', KEYS[3], member)
    meta.st = 'p'
    meta.att = 0
    store(id, meta)
    redis.call('ZADD', KEYS[1], meta.due, member)
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return moved
