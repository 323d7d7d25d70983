-- ack.lua: finish deliveries by receipt; a stale receipt changes nothing.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the slot-freed channel, ARGV[2] the queue-changed channel, ARGV[3] its
-- message, then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns one 0/1 per receipt; publishes each Subscribe tag that got slots back,
-- once per call, and (flow mode, a cap set) that the queue may deliver again.
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "bulk"
--- @include "receipt"
--- @include "delivery"
--- @include "ending"
--- @include "flow"
local slot_freed_channel, changed_channel, changed_message = ARGV[1], ARGV[2], ARGV[3]
local FIRST = 4

local now = now_ms()
open_flow(now)
local ids = {}
for i = FIRST, #ARGV do
  ids[i - FIRST + 1] = receipt_id(ARGV[i]) or ''
end
-- Each receipt is checked on its unpacked fields, not a meta table: this loop is most
-- of the script's time.
local raws = hmget(tasks, ids)
local out, done, tags, ends = {}, {}, {}, ending()
for n, id in ipairs(ids) do
  local raw = raws[n]
  out[n] = 0
  if raw and not done[id] then
    local seq, _, _, _, _, dedupe_ms, _, lease_end, state, receipt, tag, _, _, group =
      meta_fields(raw)
    if live_fields(state, receipt, lease_end, ARGV[n + FIRST - 1], now) then
      done[id] = true
      ends.unlease_fields(id, seq, tag, group)
      ends.forget_fields(id, dedupe_ms, now)
      if tag ~= '' then
        tags[tag] = true
      end
      out[n] = 1
    end
  end
end
if ends.flush() then
  redis.call('PUBLISH', changed_channel, changed_message)
end
for tag in pairs(tags) do
  redis.call('PUBLISH', slot_freed_channel, tag)
end
return out
