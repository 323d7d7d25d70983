-- attach.lua: a Subscribe stream with a worker_id takes over the live deliveries of
-- that worker's tag (from a stream that ended within the re-attach grace, on any
-- replica): same receipts, its own session, lease end now + its visibility.
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] tag, ARGV[2] session, ARGV[3] visibility ms
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (prelude.lua reclaim()); the store runs it again.
-- Returns 9 per task as prelude.lua's push_row().
local now = now_ms()
if reclaim(now) then
  return again()
end
local tag = ARGV[1]
local out = {}
each_leased(tag, function(entry, id, meta)
  if meta and meta.st == 'f' and meta.w == tag and meta.lexp > now then
    meta.s = ARGV[2]
    relet(id, meta, now + tonumber(ARGV[3]))
    push_row(out, id, meta, redis.call('HGET', KEYS[5], id), now)
  elseif not meta or meta.w ~= tag then
    redis.call('ZREM', KEYS[8], entry)
  end
end)
return out
