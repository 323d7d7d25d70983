-- attach.lua: a Subscribe stream with a worker_id takes over the live deliveries of
-- that worker's tag (from a stream that ended within the re-attach grace, on any
-- replica): same receipts, its own session, lease end now + its visibility.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] tag, ARGV[2] session, ARGV[3] visibility ms
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns 3 per task as include/push_row.lua's push_row().
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "reclaim"
--- @include "leased_index"
--- @include "lease_out"
--- @include "push_row"
--- @include "group_state"
local tag, session, visibility_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])

local now = now_ms()
open_flow(now)
if reclaim(now) then
  return again()
end
local out = {}
each_leased(tag, '', -1, function(entry, id, meta)
  if meta and in_flight(meta.state) and meta.tag == tag and meta.lease_end > now then
    meta.session = session
    relet(id, meta, now + visibility_ms)
    push_row(out, id, meta, redis.call('HGET', payloads, id), now,
      redis.call('HGET', errors, id), redis.call('HGET', progress, id))
  elseif not meta or meta.tag ~= tag then
    redis.call('ZREM', leased, entry)
  end
end)
return out
