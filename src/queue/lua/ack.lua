-- ack.lua: finish deliveries by receipt; a stale receipt changes nothing.
-- KEYS: the queue's nine keys (include/keys.lua)
-- ARGV[1] the slot-freed channel, then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns one 0/1 per receipt; publishes each Subscribe tag that got slots back,
-- once per call.
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "bulk"
--- @include "receipt"
--- @include "delivery"
--- @include "ending"
local slot_freed_channel = ARGV[1]

local now = now_ms()
local ids = {}
for i = 2, #ARGV do
  ids[i - 1] = receipt_id(ARGV[i]) or ''
end
-- Each receipt is checked on its unpacked fields, not a meta table: this loop is most
-- of the script's time.
local raws = hmget(tasks, ids)
local out, done, tags, ends = {}, {}, {}, ending()
for n, id in ipairs(ids) do
  local raw = raws[n]
  out[n] = 0
  if raw and not done[id] then
    local seq, _, _, _, _, dedupe_ms, _, lease_end, state, receipt, tag = meta_fields(raw)
    if live_fields(state, receipt, lease_end, ARGV[n + 1], now) then
      done[id] = true
      ends.unlease_fields(id, seq, tag)
      ends.forget_fields(id, dedupe_ms, now)
      if tag ~= '' then
        tags[tag] = true
      end
      out[n] = 1
    end
  end
end
ends.flush()
for tag in pairs(tags) do
  redis.call('PUBLISH', slot_freed_channel, tag)
end
return out
