-- detach.lua: a Subscribe stream ended. Its deliveries (those its session still
-- holds: a newer stream of the same worker may have taken them over) go back at
-- their original due time, or die on their last attempt; or, with a grace, stay
-- leased to the tag until now + grace so the worker can re-attach.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] grace ms (0: give
-- back now), then 2 per stream: tag, session
-- Clock: Redis TIME.
-- Returns {given back, kept for re-attach}.
--- @include "now_ms"
--- @include "meta"
--- @include "leased_index"
--- @include "lease_out"
--- @include "ending"
--- @include "give_back"
--- @include "group_state"
local changed_channel, changed_message, grace = ARGV[1], ARGV[2], tonumber(ARGV[3])

local now = now_ms()
open_flow(now)
local returned, kept, ends = 0, 0, ending()
for i = 4, #ARGV, 2 do
  local tag, session = ARGV[i], ARGV[i + 1]
  each_leased(tag, function(_, id, meta)
    if meta and in_flight(meta.state) and meta.tag == tag and meta.session == session then
      if grace > 0 then
        relet(id, meta, now + grace)
        kept = kept + 1
      elseif expire_delivery(ends, id, meta, now) then
        returned = returned + 1
      end
    end
  end)
end
if ends.flush() or returned > 0 then
  redis.call('PUBLISH', changed_channel, changed_message)
end
return {returned, kept}
