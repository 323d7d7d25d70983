-- promote.lua: due tasks into `ready` (their group's order) and `ranked` (the queue's
-- order), their groups considered for the rotation.
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "rotation"

-- Collects READY tasks to be placed in `ready` and `ranked`; place() sends them and
-- considers their groups, in the order their first tasks came (so groups new to the
-- rotation join it in that order).
local function readying()
  local entries, ranks, touched, order = {}, {}, {}, {}
  local r = {}
  function r.add(id, seq, priority, due, group)
    entries[#entries + 1] = '0'
    entries[#entries + 1] = ready_entry(group, priority, due, seq, id)
    ranks[#ranks + 1] = rank_score(priority, due)
    ranks[#ranks + 1] = member(seq, id)
    if not touched[group] then
      touched[group] = true
      order[#order + 1] = group
    end
  end
  function r.place()
    if #entries > 0 then
      bulk('ZADD', ready, entries)
      bulk('ZADD', ranked, ranks)
      consider_all(order, true)
    end
  end
  return r
end

-- Promotes due tasks from pending (at most PROMOTE_PER_RUN). True when it promoted
-- that many: more may be due, and the script answers again().
local function promote(now)
  local due = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0, PROMOTE_PER_RUN)
  if #due == 0 then
    return false
  end
  local ids = {}
  for n, entry in ipairs(due) do
    ids[n] = id_of(entry)
  end
  local raws = hmget(tasks, ids)
  local r = readying()
  for n, id in ipairs(ids) do
    if raws[n] then
      local seq, due_at, _, _, _, _, _, _, _, _, _, _, priority, group = meta_fields(raws[n])
      r.add(id, seq, priority, due_at, group)
    end
  end
  redis.call('ZREMRANGEBYRANK', pending, 0, #due - 1)
  r.place()
  return #due == PROMOTE_PER_RUN
end
