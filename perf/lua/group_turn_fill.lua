-- group_turn_fill.lua: 100,000 groups' in-flight and waiting counts (fields <g>\0f and
-- <g>\0n) in the hash KEYS[1], and two entries a group in the zset KEYS[2], as flow.lua
-- keeps them. Run: redis-cli --eval perf/lua/group_turn_fill.lua grp rdy
for i = 0, 99999 do
  local g = 'g' .. i
  redis.call('HSET', KEYS[1], g .. '\0f', 1, g .. '\0n', 1)
  redis.call('ZADD', KEYS[2], 0, g .. '\0' .. '9000001764000000000000000000001:task-' .. i .. 'a', 0, g .. '\0' .. '9000001764000000000000000000002:task-' .. i .. 'b')
end
return 'ok'
