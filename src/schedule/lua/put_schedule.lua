-- put_schedule.lua: create or replace a schedule, and tell every replica.
-- KEYS[1] defs (hash name -> JSON), KEYS[2] names (zset, all score 0), KEYS[3] since
--   (hash name -> Unix ms: fire times at or before it are never fired)
-- ARGV[1] name, ARGV[2] JSON (src/schedule/record.rs), ARGV[3] 'keep' (a replaced
--   schedule keeps its since) or 'now' (since = now: a new, resumed or moved schedule
--   fires only after the put), ARGV[4] the schedule-changed channel
-- Clock: Redis TIME.
-- Returns since (Unix ms).
local defs, names, since = KEYS[1], KEYS[2], KEYS[3]
local name, json, mode, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local time = redis.call('TIME')
local at = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if mode == 'keep' then
  at = tonumber(redis.call('HGET', since, name)) or at
end
redis.call('HSET', defs, name, json)
redis.call('ZADD', names, 0, name)
redis.call('HSET', since, name, at)
redis.call('PUBLISH', channel, name)
return at
