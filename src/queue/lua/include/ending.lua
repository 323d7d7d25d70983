-- ending.lua: gathers the writes that end deliveries and remove finished tasks over a
-- script, and sends them as one variadic command per key on flush(). A caller flushes
-- before it reads inflight, leased, tasks or payloads again, and handles each id once.
--- @include "keys"
--- @include "member"
--- @include "bulk"
--- @include "leased_index"
--- @include "group_state"
--- @include "ended_deliveries"
local function ending()
  local ended_members, ended_entries, gone, windows, ended_groups = {}, {}, {}, {}, {}
  -- The groups of ended deliveries in the order they first ended (so that groups
  -- rejoin the rotation in a fixed order).
  local group_order = {}
  local e = {}
  -- Ends a delivery's lease records (inflight and the Subscribe index), from its
  -- meta's seq, tag (nil or '' for none) and group.
  function e.unlease_fields(id, seq, tag, group)
    ended_members[#ended_members + 1] = member(seq, id)
    if tag and tag ~= '' then
      ended_entries[#ended_entries + 1] = leased_entry(tag, id)
    end
    if not ended_groups[group] then
      group_order[#group_order + 1] = group
    end
    ended_groups[group] = (ended_groups[group] or 0) + 1
  end
  function e.unlease(id, meta)
    e.unlease_fields(id, meta.seq, meta.tag, meta.group)
  end
  -- Removes a finished task; its id stays reserved for its dedupe window. (Its group's
  -- counts moved already: an ended delivery, a cancelled or auto-acked task.)
  function e.forget_fields(id, dedupe_ms, now)
    gone[#gone + 1] = id
    if dedupe_ms > 0 then
      windows[#windows + 1] = string.format('%d', now + dedupe_ms)
      windows[#windows + 1] = id
    end
  end
  function e.forget(id, meta, now)
    e.forget_fields(id, meta.dedupe_ms, now)
  end
  -- Sends the writes. True when, in flow mode with a cap set, deliveries ended: the
  -- script then tells the queue's dispatchers (a capped task may go now).
  function e.flush()
    local freed = false
    if flow.on and #group_order > 0 then
      freed = deliveries_ended(ended_groups, group_order)
    end
    ended_groups, group_order = {}, {}
    if #ended_members > 0 then
      bulk('ZREM', inflight, ended_members)
    end
    if #ended_entries > 0 then
      bulk('ZREM', leased, ended_entries)
    end
    if #gone > 0 then
      bulk('HDEL', tasks, gone)
      bulk('HDEL', payloads, gone)
      bulk('HDEL', errors, gone)
      bulk('HDEL', progress, gone)
      bulk('HDEL', attempts, gone)
    end
    if #windows > 0 then
      bulk('ZADD', reserved, windows)
    end
    return freed
  end
  return e
end
