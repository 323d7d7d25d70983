-- finish.lua: ack.lua's work, shared with ack_and_dispatch.lua: ends the deliveries
-- whose receipts are live and removes their tasks; a stale receipt changes nothing.
-- `args[first..]` are the receipts; `now` is Redis TIME in ms (a lease that ran out
-- makes its receipt stale).
-- Returns one 0/1 per receipt, the set of Subscribe tags that got slots back, and
-- whether (flow mode, a cap set) the queue may deliver again.
--- @include "keys"
--- @include "meta"
--- @include "bulk"
--- @include "receipt"
--- @include "delivery"
--- @include "ending"
local function finish(now, args, first)
  local ids = {}
  for i = first, #args do
    ids[i - first + 1] = receipt_id(args[i]) or ''
  end
  -- Each receipt is checked on its unpacked fields, not a meta table: this loop is
  -- most of the script's time.
  local raws = hmget(tasks, ids)
  local out, done, tags, ends = {}, {}, {}, ending()
  for n, id in ipairs(ids) do
    local raw = raws[n]
    out[n] = 0
    if raw and not done[id] then
      local seq, _, _, _, _, dedupe_ms, _, lease_end, state, receipt, tag, _, _, group =
        meta_fields(raw)
      if live_fields(state, receipt, lease_end, args[n + first - 1], now) then
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
  return out, tags, ends.flush()
end
