-- configure_group.lua: pause or resume one group of a queue, or set its weight (its
-- deliveries per turn of the rotation); the fields not given stay. Puts the queue in
-- flow mode (include/group_state.lua).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] the group,
-- ARGV[4] paused ('' unchanged, '0', '1'), ARGV[5] weight ('' unchanged, 0 = default 1)
-- Clock: Redis TIME.
-- Returns {paused (0/1), weight (0: the default 1)}.
--- @include "keys"
--- @include "now_ms"
--- @include "group_state"
--- @include "rotation"
local changed_channel, changed_message, group, paused, weight =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local now = now_ms()
open_flow(now)
enter_flow()
redis.call('ZADD', group_index, 0, group)
if weight == '0' then
  redis.call('HDEL', groups, gfield(group, G_WEIGHT))
elseif weight ~= '' then
  redis.call('HSET', groups, gfield(group, G_WEIGHT), weight)
end
if paused == '1' then
  redis.call('HSET', groups, gfield(group, G_PAUSED), '1')
  redis.call('ZREM', rotation, group)
  redis.call('ZREM', wakeups, group)
  redis.call('HDEL', groups, gfield(group, G_CREDIT))
elseif paused == '0' then
  redis.call('HDEL', groups, gfield(group, G_PAUSED))
  consider(group)
  redis.call('PUBLISH', changed_channel, changed_message)
end
drop_if_idle(group)
local state = redis.call('HMGET', groups, gfield(group, G_PAUSED), gfield(group, G_WEIGHT))
return {state[1] == '1' and 1 or 0, number_of(state[2])}
