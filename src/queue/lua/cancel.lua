-- cancel.lua: remove tasks that are not in flight (DELAYED, READY or DEAD).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV: the ids
-- Clock: Redis TIME (the dedupe window; leases that ran out end first).
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns the ids removed.
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "member"
--- @include "load"
--- @include "reclaim"
--- @include "ending"
--- @include "flow"
local now = now_ms()
open_flow(now)
-- A task whose lease ran out is no longer in flight: it may be cancelled.
if reclaim(now) then
  return again()
end
local out, done, ends = {}, {}, ending()
for i = 1, #ARGV do
  local id = ARGV[i]
  local meta = not done[id] and load(id)
  if meta and meta.state ~= IN_FLIGHT then
    done[id] = true
    unplace(id, meta)
    ends.forget(id, meta, now)
    out[#out + 1] = id
  end
end
ends.flush()
return out
