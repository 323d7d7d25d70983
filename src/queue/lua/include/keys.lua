-- keys.lua: a queue's keys, every one under the queue's hash tag, in KEYS order (the
-- order `QueueKeys::all` builds them in, src/redis/keys.rs):
--   pending      zset    member "<15-digit seq>:<id>", score = due (Unix ms); due <= now
--                        is READY, later is DELAYED (in flow mode: the tasks not yet
--                        promoted to ready/ranked)
--   inflight     zset    the same members, score = lease end (Unix ms)
--   dead         zset    the same members, score = when it went DEAD (Unix µs; before
--                        task outcomes, its due time in ms)
--   tasks        hash    id -> meta, packed as meta.lua lays it out
--   payloads     hash    id -> payload bytes
--   reserved     zset    id -> until (Unix ms): ids held by a dedupe window
--   enqueue_seq  string  the enqueue counter (ties leave in enqueue order)
--   leased       zset    "<tag>\0<id>", all score 0: Subscribe deliveries by tag, so a
--                        stream's count (ZLEXCOUNT) and tasks (ZRANGEBYLEX) are cheap
--   counters     hash    dead -> tasks that ever went DEAD (the dead-letter metric)
-- Flow control (include/group_state.lua; all empty until the queue is in flow mode):
--   config       hash    the QueueConfig fields, `flow` (in flow mode), `tat` (the
--                        queue's rate limiter), `turn` (the rotation's counter)
--   ready        zset    promoted READY tasks, all score 0, by group in each group's
--                        order: "<group>\0<9 - priority><15-digit due><seq>:<id>"
--   ranked       zset    the same tasks over the queue: member "<seq>:<id>", score
--                        (9 - priority) * 2^42 + due
--   rotation     zset    groups that can deliver now, in turn order (score = turn)
--   groups       hash    "<group>\0<field>" -> a group's state: w weight, p paused,
--                        f in flight, c deliveries in its current turn, h the task it
--                        must deliver next (one at a time), t its rate limiter, n its
--                        waiting tasks (READY or DELAYED), x its DEAD tasks
--   wakeups      zset    blocked groups -> when a rate limit lets them go again
--                        (CAPPED: waiting for a delivery of theirs to end)
--   group_index  zset    the groups that hold a task or a config, all score 0 (by name)
-- The dashboard's history (include/history.lua):
--   history      hash    per minute of the last hour: deliveries, tasks waiting
-- Task outcomes:
--   errors       hash    id -> the error its last failed delivery's Nack gave (gone
--                        with the task)
--   progress     hash    id -> the latest progress a worker reported (ExtendLease; gone
--                        with the task)
--   attempts     hash    id -> its delivery history, packed as include/attempts.lua lays
--                        it out (gone with the task)
--   results      hash    id -> the bytes its Ack gave (kept COMPLETED tasks only)
--   completed    zset    kept COMPLETED tasks: member "<seq>:<id>", score = when acked
--                        (Unix µs)
--   cancelled    zset    kept CANCELLED tasks: the same, score = when cancelled
--   watched      zset    id -> until when a Wait (or Enqueue.wait) waits for it (Unix
--                        ms): a task's end is published only when someone waits
--   told         hash    id -> the end published for its waiters (include/announce.lua),
--                        kept a while for a waiter whose replica did not hear it
--   told_until   zset    id -> until when `told` keeps its end (Unix ms)
-- How many there are: a script given keys beyond them (fire.lua) counts from here.
local QUEUE_KEY_COUNT = 26
local pending, inflight, dead, tasks, payloads, reserved, enqueue_seq, leased, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local config, ready, ranked, rotation, groups, wakeups, group_index, history =
  KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17]
local errors, progress, attempts, results = KEYS[18], KEYS[19], KEYS[20], KEYS[21]
local completed, cancelled, watched, told, told_until =
  KEYS[22], KEYS[23], KEYS[24], KEYS[25], KEYS[26]
