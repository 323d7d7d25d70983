-- within_budget.lua: the leading members whose payloads fit in budget bytes (the
-- first always does, so a reply is never empty), as arrays: ids, packed metas (false
-- where gone), payloads, last errors and progress (false where none). Sizes come from the metas, so only the payloads returned are
-- read; the metas stay packed, for the caller to unpack as it needs (a table per task
-- costs more than the commands that move it).
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"

-- The most plain deliveries (no flow mode) one run makes, by their cost: about 20 us
-- of Redis each, so a run stays within about 5 ms (a Lease of 1,000 held Redis 21 ms
-- in one run). The callers look again at once: a Lease runs again to fill its batch,
-- and a feed's next pass is due now while due tasks remain.
local PLAIN_RUN_DELIVERIES = 200

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
