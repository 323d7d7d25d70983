-- delete_schedule.lua: delete a schedule (its tasks stay in their queue), and tell
-- every replica.
-- KEYS[1] defs, KEYS[2] names, KEYS[3] since (put_schedule.lua says what they hold)
-- ARGV[1] name, ARGV[2] the schedule-changed channel
-- Returns 1 when there was such a schedule, else 0.
local defs, names, since = KEYS[1], KEYS[2], KEYS[3]
local name, channel = ARGV[1], ARGV[2]

local deleted = redis.call('HDEL', defs, name)
redis.call('ZREM', names, name)
redis.call('HDEL', since, name)
if deleted == 1 then
  redis.call('PUBLISH', channel, name)
end
return deleted
