-- nack.lua: give a delivery back, due again at now + delay, or DEAD when it was the
-- last attempt; a stale receipt changes nothing.
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] receipt, ARGV[2] delay ms, ARGV[3] the queue-changed channel,
-- ARGV[4] its message, ARGV[5] the slot-freed channel
-- Clock: Redis TIME.
-- Returns {requeued 0/1, dead 0/1}.
local now = now_ms()
local id, meta = delivery(ARGV[1], now)
if not id then
  return {0, 0}
end
local ends = ending()
ends.unlease(id, meta)
ends.flush()
local worker = meta.w
local state = give_back(id, meta, now + tonumber(ARGV[2]))
if worker then
  redis.call('PUBLISH', ARGV[5], worker)
end
if state == 'd' then
  return {0, 1}
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return {1, 0}
