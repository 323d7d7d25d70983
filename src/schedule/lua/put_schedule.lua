-- put_schedule.lua: create or replace a schedule, and tell every replica.
-- KEYS[1] defs (hash name -> JSON), KEYS[2] names (zset, all score 0), KEYS[3] since
--   (hash name -> Unix ms: fire times at or before it are never fired)
-- ARGV[1] name, ARGV[2] JSON (src/schedule/record.rs), ARGV[3] the schedule-changed
--   channel
-- A replaced schedule keeps its since (the record of its fire times, on the queue's
-- slot, keeps it from firing one twice); a new one, one resumed (paused before, not
-- now) or one moved to another queue fires only after the put: since = now. Decided
-- here, against the stored definition, so two puts cannot race between a read and
-- this write.
-- Clock: Redis TIME.
-- Returns since (Unix ms).
local defs, names, since = KEYS[1], KEYS[2], KEYS[3]
local name, json, channel = ARGV[1], ARGV[2], ARGV[3]

local time = redis.call('TIME')
local at = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local stored = redis.call('HGET', defs, name)
if stored then
  local old, new = cjson.decode(stored), cjson.decode(json)
  if old.queue == new.queue and (new.paused or not old.paused) then
    at = tonumber(redis.call('HGET', since, name)) or at
  end
end
redis.call('HSET', defs, name, json)
redis.call('ZADD', names, 0, name)
redis.call('HSET', since, name, at)
redis.call('PUBLISH', channel, name)
return at
