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
local out, done, members, entries, gone, windows, tags = {}, {}, {}, {}, {}, {}, {}
for n, id in ipairs(ids) do
  local meta = metas[n]
  if not done[id] and live(meta, ARGV[n + 1], now) then
    done[id] = true
    members[#members + 1] = member_of(meta, id)
    gone[#gone + 1] = id
    if meta.w then
      entries[#entries + 1] = meta.w .. '\0' .. id
      tags[meta.w] = true
    end
    if meta.dd > 0 then
      windows[#windows + 1] = now + meta.dd; windows[#windows + 1] = id
    end
    out[n] = 1
  else
    out[n] = 0
  end
end
if #gone > 0 then
  bulk('ZREM', KEYS[2], members)
  bulk('HDEL', KEYS[4], gone)
  bulk('HDEL', KEYS[5], gone)
  if #entries > 0 then
    bulk('ZREM', KEYS[8], entries)
  end
  if #windows > 0 then
    bulk('ZADD', KEYS[6], windows)
  end
end
for tag in pairs(tags) do
  redis.call('PUBLISH', ARGV[1], tag)
end
return out
