-- extend_lease.lua: push a live delivery's lease end to now + visibility.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] receipt, ARGV[2] visibility ms, then optionally ARGV[3] the progress to
-- keep (the caller bounded it)
-- Clock: Redis TIME.
-- Returns {1, lease end ms, cancelled 0/1} extended (cancelled: Cancel.running asked
-- it to stop), {0} stale receipt.
--- @include "keys"
--- @include "now_ms"
--- @include "delivery"
--- @include "lease_out"
local receipt, visibility_ms = ARGV[1], tonumber(ARGV[2])

local now = now_ms()
local id, meta = delivery(receipt, now)
if not id then
  return {0}
end
relet(id, meta, now + visibility_ms)
if #ARGV >= 3 then
  redis.call('HSET', progress, id, ARGV[3])
end
return {1, meta.lease_end, meta.state == STOPPING and 1 or 0}
