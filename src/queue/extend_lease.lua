-- extend_lease.lua: push a live delivery's lease end to now + visibility.
-- KEYS[1..7] as in prelude.lua
-- ARGV[1] receipt, ARGV[2] visibility ms
-- Clock: Redis TIME.
-- Returns {1, lease end ms} extended, {0} stale receipt.
local now = now_ms()
local id, meta = delivery(ARGV[1], now)
if not id then
  return {0}
end
meta.lexp = now + tonumber(ARGV[2])
store(id, meta)
redis.call('ZADD', KEYS[2], 'XX', meta.lexp, member_of(meta, id))
return {1, meta.lexp}
