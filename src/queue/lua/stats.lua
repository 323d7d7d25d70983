-- stats.lua: queue depths. Not read only: expired leases are returned first, as Lease
-- would, so the depths agree with what a Lease would find. Like peek.lua, it does not
-- wait for replicas (@no-replica-wait).
-- KEYS: the queue's keys (include/keys.lua)
-- No ARGV. Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns {ready, delayed, in_flight, dead, oldest_ready_at (-1 none), next_due_at (-1 none),
-- dead letters ever, then the config: paused (0/1), max_in_flight, group_max_in_flight,
-- rate_limit and group_rate_limit ("limit period_ms burst", '' for none), then the
-- deliveries that started in the last five minutes, this one included
-- (include/history.lua)}.
--- @no-replica-wait
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "group_state"
--- @include "rotation"
local now = now_ms()
open_flow(now)
if reclaim(now) then
  return again()
end
-- In flow mode the READY tasks are the promoted ones and those due but not yet
-- promoted (still in pending).
local ready = redis.call('ZCOUNT', pending, '-inf', now) + redis.call('ZCARD', ranked)
local delayed = redis.call('ZCOUNT', pending, '(' .. now, '+inf')
local oldest, next_due = -1, -1
local first = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) <= now then
  oldest = tonumber(first[2])
end
if flow.on and redis.call('ZCARD', ranked) > 0 then
  -- The oldest of each priority's band.
  for band = 0, 9 do
    local from = band * PRIORITY_BAND
    local head = redis.call('ZRANGEBYSCORE', ranked, from, '(' .. (from + PRIORITY_BAND),
      'WITHSCORES', 'LIMIT', 0, 1)
    if head[2] then
      local due = tonumber(head[2]) - from
      if oldest < 0 or due < oldest then
        oldest = due
      end
    end
  end
end
local later = redis.call('ZRANGEBYSCORE', pending, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if later[2] then
  next_due = tonumber(later[2])
end
local dead_letters = tonumber(redis.call('HGET', counters, 'dead') or '0')
local cfg = flow.cfg
local minute = math.floor(now / 60000)
local recent = 0
for _, n in ipairs(redis.call('HMGET', history, minute, minute - 1, minute - 2, minute - 3,
    minute - 4)) do
  recent = recent + (tonumber(n) or 0)
end
local out = {ready, delayed, redis.call('ZCARD', inflight), redis.call('ZCARD', dead),
  oldest, next_due, dead_letters, cfg.paused == '1' and 1 or 0,
  number_of(cfg.max_in_flight), number_of(cfg.group_max_in_flight), cfg.rate or '',
  cfg.group_rate or '', cfg.keep_completed or '', cfg.keep_dead or '', recent}
-- The deliveries that ended, by outcome (include/attempts.lua's codes, in
-- src/queue/model.rs Outcome::ALL's order), then the kept tasks.
for _, count in ipairs(redis.call('HMGET', counters, 'o:a', 'o:n', 'o:e', 'o:g', 'o:c')) do
  out[#out + 1] = tonumber(count or '0')
end
out[#out + 1] = redis.call('ZCARD', completed)
out[#out + 1] = redis.call('ZCARD', cancelled)
return out
