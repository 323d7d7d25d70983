-- ack.lua: finish deliveries by receipt; a stale receipt changes nothing.
-- KEYS[1..8] as in prelude.lua
-- ARGV[1] the slot-freed channel, then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns one 0/1 per receipt; publishes the worker tag of each freed Subscribe slot.
local now = now_ms()
local out = {}
for i = 2, #ARGV do
  local id, meta = delivery(ARGV[i], now)
  if id then
    unlease(id, meta)
    forget(id, meta, now)
    if meta.w then
      redis.call('PUBLISH', ARGV[1], meta.w)
    end
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
