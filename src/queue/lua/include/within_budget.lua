-- within_budget.lua: the leading members whose payloads fit in budget bytes (the
-- first always does, so a reply is never empty), as arrays: ids, packed metas (false
-- where gone), payloads, last errors and progress (false where none). Sizes come from the metas, so only the payloads returned are
-- read; the metas stay packed, for the caller to unpack as it needs (a table per task
-- costs more than the commands that move it).
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
local function within_budget(members, budget)
  local ids = {}
  for n, entry in ipairs(members) do
    ids[n] = id_of(entry)
  end
  local raws = hmget(tasks, ids)
  local used, taken = 0, 0
  for n, id in ipairs(ids) do
    used = used + (raws[n] and size_of(raws[n]) or 0) + #id + 128
    if n > 1 and used > budget then
      break
    end
    taken = n
  end
  for n = #ids, taken + 1, -1 do
    ids[n] = nil
    raws[n] = nil
  end
  return ids, raws, hmget(payloads, ids), hmget(errors, ids), hmget(progress, ids)
end
