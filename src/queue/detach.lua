-- detach.lua: a Subscribe stream ended. Its deliveries (those its session still
-- holds: a newer stream of the same worker may have taken them over) go back at
-- their original due time, or die on their last attempt; or, with a grace, stay
-- leased to the tag until now + grace so the worker can re-attach.
-- KEYS[1..9] as in prelude.lua
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] grace ms (0: give
-- back now), then 2 per stream: tag, session
-- Clock: Redis TIME.
-- Returns {given back, kept for re-attach}.
local now = now_ms()
local grace = tonumber(ARGV[3])
local returned, kept, ends = 0, 0, ending()
for i = 4, #ARGV, 2 do
  local tag, session = ARGV[i], ARGV[i + 1]
  each_leased(tag, function(_, id, meta)
    if meta and meta.st == 'f' and meta.w == tag and meta.s == session then
      if grace > 0 then
        relet(id, meta, now + grace)
        kept = kept + 1
      elseif expire_delivery(ends, id, meta) then
        returned = returned + 1
      end
    end
  end)
end
ends.flush()
if returned > 0 then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return {returned, kept}
