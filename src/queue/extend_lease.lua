-- extend_lease.lua: push a live delivery's lease end to now + visibility.
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] receipt, ARGV[2] visibility ms
-- Clock: Redis TIME.
-- Returns {1, lease end ms} extended, {0} stale receipt.
local now = now_ms()
local id, meta = delivery(ARGV[1], now)
if not id then
  return {0}
end
relet(id, meta, now + tonumber(ARGV[2]))
return {1, meta.lexp}
