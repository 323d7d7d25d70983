-- ack.lua: finish deliveries by receipt; a stale receipt changes nothing.
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] the slot-freed channel, then the receipts
-- Clock: Redis TIME (a lease that ran out makes its receipt stale).
-- Returns one 0/1 per receipt; publishes each Subscribe tag that got slots back,
-- once per call.
local now = now_ms()
local ids = {}
for i = 2, #ARGV do
  ids[i - 1] = receipt_id(ARGV[i]) or ''
end
-- Each receipt is checked on its unpacked fields, not a meta table: this loop is most
-- of the script's time.
local raws = hmget(KEYS[4], ids)
local out, done, tags, ends = {}, {}, {}, ending()
for n, id in ipairs(ids) do
  local raw = raws[n]
  out[n] = 0
  if raw and not done[id] then
    local seq, _, _, _, _, dd, _, lexp, st, rcpt, w = meta_fields(raw)
    if live_fields(st, rcpt, lexp, ARGV[n + 1], now) then
      done[id] = true
      ends.unlease_fields(id, seq, w)
      ends.forget_fields(id, dd, now)
      if w ~= '' then
        tags[w] = true
      end
      out[n] = 1
    end
  end
end
ends.flush()
for tag in pairs(tags) do
  redis.call('PUBLISH', ARGV[1], tag)
end
return out
