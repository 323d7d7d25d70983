-- enqueue_and_dispatch.lua: enqueue.lua, then dispatch.lua's leasing to the streams
-- given, in one run: an enqueue on a replica whose Subscribe feed for the queue is
-- asleep hands the tasks to its streams without the pub/sub hop and the second round
-- trip of a dispatch (the push's path is one script shorter).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] the message (the pending key), ARGV[3]
-- the values per task (7 or 9, as enqueue.lua), ARGV[4] receipt prefix (random, per
-- call), ARGV[5] the most payload bytes to return, ARGV[6] the number of streams S,
-- then 4 per stream (tag, session, max_in_flight, visibility ms), then the tasks as
-- enqueue.lua takes them.
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again. Once the tasks are
-- stored nothing answers AGAIN: when promotion has more to do than one run (flow
-- mode), the leasing is left to the feeds, which queue-changed wakes as after any
-- enqueue.
-- Returns {enqueue.lua's reply, dispatch.lua's reply}, or {enqueue.lua's reply} when
-- it leased nothing because promotion had more to do. queue-changed is published as
-- after any enqueue unless every task this run stored was leased in it: then no
-- other feed or long poll has anything to take (this replica's feed learns the new
-- lease end from the reply).
--- @include "keys"
--- @include "now_ms"
--- @include "reclaim"
--- @include "group_state"
--- @include "promote"
--- @include "history"
--- @include "add"
--- @include "pack_added"
--- @include "dispatch_to"
local changed_channel, changed_message, stride = ARGV[1], ARGV[2], tonumber(ARGV[3])
local receipt_prefix, budget, streams = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local tasks_from = 7 + 4 * streams

local now, now_us = now_ms_us()
open_flow(now)
if reclaim(now) then
  return again()
end
local enqueued = add(ARGV, tasks_from, stride, now, nil, nil)
-- Whether a task this run stored is still waiting after the leasing.
local function stored_waits(taken, metas)
  local leased = {}
  for n, id in ipairs(taken) do
    if metas[n] then
      leased[id] = true
    end
  end
  for k = 1, #enqueued, 3 do
    local id = ARGV[tasks_from + (k - 1) / 3 * stride]
    if (enqueued[k] == 1 or enqueued[k + 1] == 1) and not leased[id] then
      return true
    end
  end
  return false
end
if flow.on and promote(now) then
  redis.call('PUBLISH', changed_channel, changed_message)
  record_history(now, 0)
  return {pack_added(enqueued)}
end
local dispatched, delivered, taken, metas = dispatch_to(now, now_us, receipt_prefix, budget,
  ARGV, 7, tasks_from - 1)
if stored_waits(taken, metas) then
  redis.call('PUBLISH', changed_channel, changed_message)
end
record_history(now, delivered)
return {pack_added(enqueued), dispatched}
