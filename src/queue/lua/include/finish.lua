-- finish.lua: ack.lua's work, shared with ack_and_dispatch.lua: ends the deliveries
-- whose receipts are live and removes their tasks (or keeps them as COMPLETED, with
-- their results, when the queue keeps them: include/keep.lua); a stale receipt changes
-- nothing. `args[first..]` are the receipts; `returned` maps a receipt to what its
-- delivery returned (nil: none); `now` is Redis TIME in ms (a lease that ran out makes
-- its receipt stale). Waiters for the tasks hear of their end (include/announce.lua).
-- Returns one '0'/'1' per receipt (strings: table.concat would format a number as a
-- float), the set of Subscribe tags that got slots back, and whether (flow mode, a cap
-- set) the queue may deliver again.
--- @include "keys"
--- @include "meta"
--- @include "bulk"
--- @include "receipt"
--- @include "delivery"
--- @include "ending"
--- @include "attempts"
--- @include "keep"
--- @include "announce"
--- @include "cancelling"
local function finish(now, args, first, returned)
  local ids = {}
  for i = first, #args do
    ids[i - first + 1] = receipt_id(args[i]) or ''
  end
  -- Each receipt is checked on its unpacked fields, not a meta table: this loop is
  -- most of the script's time. Kept tasks and awaited ones take the slower path.
  local raws = hmget(tasks, ids)
  local out, done, tags, ends = {}, {}, {}, ending()
  local keep, heard = keeping() ~= nil, awaited(now)
  local kept, acked = 0, 0
  for n, id in ipairs(ids) do
    local raw = raws[n]
    out[n] = '0'
    if raw and not done[id] then
      local seq, _, _, _, _, dedupe_ms, _, lease_end, state, receipt, tag, _, _, group =
        meta_fields(raw)
      local given = args[n + first - 1]
      if live_fields(state, receipt, lease_end, given, now) and state == STOPPING then
        -- Cancelled while it ran: its Ack ends it as CANCELLED.
        done[id] = true
        end_cancelled(ends, id, decode(raw), now)
        if tag ~= '' then
          tags[tag] = true
        end
        out[n] = '1'
      elseif live_fields(state, receipt, lease_end, given, now) then
        done[id] = true
        acked = acked + 1
        ends.unlease_fields(id, seq, tag, group)
        local result = returned and returned[given]
        if keep then
          local meta = decode(raw)
          record_attempt(id, meta, now, OUT_ACKED)
          keep_ended(id, meta, COMPLETED, completed, now)
          if result then
            redis.call('HSET', results, id, result)
          end
          kept = kept + 1
          if heard then
            announce(now, id, meta, 'completed')
          end
        else
          if heard then
            local meta = decode(raw)
            local history = (redis.call('HGET', attempts, id) or '') ..
              pack_attempt(meta.attempt, meta.leased_at, now, OUT_ACKED, worker_of(tag), '')
            announce(now, id, meta, 'completed', history, result or '')
          end
          ends.forget_fields(id, dedupe_ms, now)
        end
        if tag ~= '' then
          tags[tag] = true
        end
        out[n] = '1'
      end
    end
  end
  if keep then
    prune(completed, now, kept)
  end
  if acked > 0 then
    redis.call('HINCRBY', counters, 'o:' .. OUT_ACKED, acked)
  end
  return out, tags, ends.flush()
end
