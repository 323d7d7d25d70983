-- wait.lua: a Wait (or Enqueue.wait) for task ARGV[1]: answers a task that is done
-- (COMPLETED, DEAD or CANCELLED) and kept at once; otherwise registers the wait so
-- that the script that ends the task publishes its end (include/announce.lua).
-- Writes only the registration, which tells the caller nothing was stored, so it does
-- not wait for replicas (@no-replica-wait).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the id, ARGV[2] how long the caller waits (ms), ARGV[3] the task-done
-- channel; ARGV[4] '1' to register even when the task is done (Enqueue.wait registers
-- before it enqueues; a done task is answered anyway), '2' for a registered waiter's
-- look once its replica subscribed again: an end it may not have heard, kept in
-- `told` (include/announce.lua), answers it when the task is gone.
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns {done 0/1} when the queue does not hold the task, else {done 0/1, then the
-- task's row (include/push_row.lua), its history and its result}; {2, the end's
-- message as include/announce.lua published it} for a told end (ARGV[4] '2').
--- @no-replica-wait
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "load"
--- @include "reclaim"
--- @include "push_row"
--- @include "group_state"
local id, wait_ms, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
-- Waits that ran out leave their registrations; each run drops a few.
local STALE_PER_RUN = 16

local now = now_ms()
open_flow(now)
if reclaim(now) then
  return again()
end
local meta = load(id)
local done = meta and (meta.state == COMPLETED or meta.state == DEAD or
  meta.state == CANCELLED)
if (not done or ARGV[4] == '1') and wait_ms > 0 then
  local until_ms = now + wait_ms
  -- GT: a longer wait of another caller is not shortened (and a new id is added).
  redis.call('ZADD', watched, 'GT', until_ms, id)
  if number_of(flow.cfg.watch_until) < until_ms then
    redis.call('HSET', config, 'watch_until', until_ms, 'watch_channel', channel)
  end
  local stale = redis.call('ZRANGEBYSCORE', watched, '-inf', string.format('(%d', now),
    'LIMIT', 0, STALE_PER_RUN)
  if #stale > 0 then
    redis.call('ZREM', watched, unpack(stale))
  end
end
if not meta then
  local message = ARGV[4] == '2' and redis.call('HGET', told, id)
  if message then
    return {2, message}
  end
  return {0}
end
local out = {done and 1 or 0}
meta.receipt = nil
push_row(out, id, meta, redis.call('HGET', payloads, id), now,
  redis.call('HGET', errors, id), redis.call('HGET', progress, id))
out[#out + 1] = redis.call('HGET', attempts, id) or ''
out[#out + 1] = redis.call('HGET', results, id) or ''
return out
