-- keys.lua: a queue's keys, every one under the queue's hash tag, in KEYS order (the
-- order `QueueKeys::all` builds them in, src/redis/keys.rs):
--   pending      zset    member "<15-digit seq>:<id>", score = due (Unix ms); due <= now
--                        is READY, later is DELAYED
--   inflight     zset    the same members, score = lease end (Unix ms)
--   dead         zset    the same members, score = due (Unix ms)
--   tasks        hash    id -> meta, packed as meta.lua lays it out
--   payloads     hash    id -> payload bytes
--   reserved     zset    id -> until (Unix ms): ids held by a dedupe window
--   enqueue_seq  string  the enqueue counter (ties leave in enqueue order)
--   leased       zset    "<tag>\0<id>", all score 0: Subscribe deliveries by tag, so a
--                        stream's count (ZLEXCOUNT) and tasks (ZRANGEBYLEX) are cheap
--   counters     hash    dead -> tasks that ever went DEAD (the dead-letter metric)
local pending, inflight, dead, tasks, payloads, reserved, enqueue_seq, leased, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
