-- ack.lua: finish deliveries by receipt; a stale receipt changes nothing.
-- KEYS[1..8] as in prelude.lua
-- ARGV[1] the slot-freed channel, then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns one 0/1 per receipt; publishes each Subscribe tag that got slots back,
-- once per call.
local now = now_ms()
local ids = {}
for i = 2, #ARGV do
  ids[i - 1] = receipt_id(ARGV[i]) or ''
end
local metas = load_many(ids)
local out, done, tags, ends = {}, {}, {}, ending()
for n, id in ipairs(ids) do
  local meta = metas[n]
  if not done[id] and live(meta, ARGV[n + 1], now) then
    done[id] = true
    ends.unlease(id, meta)
    ends.forget(id, meta, now)
    if meta.w then
      tags[meta.w] = true
    end
    out[n] = 1
  else
    out[n] = 0
  end
end
ends.flush()
for tag in pairs(tags) do
  redis.call('PUBLISH', ARGV[1], tag)
end
return out
