-- detach.lua: Subscribe streams ended. Their deliveries (those their session still
-- holds: a newer stream of the same worker may have taken them over) go back at
-- their original due time, or die on their last attempt; or, with a grace, stay
-- leased to the tag until now + grace so the worker can re-attach. A run looks at
-- most at a budget of deliveries (1,000 in one run held Redis 7.4 ms in `bench
-- limits`); the store runs it again from where it stopped.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] grace ms (0: give
-- back now), ARGV[4] the most deliveries to look at, ARGV[5] the entry of the first
-- stream's deliveries to go on after ('' for its first), then 2 per stream: tag,
-- session
-- Clock: Redis TIME.
-- Returns {given back, kept for re-attach, streams finished, cursor}: the streams
-- finished lead the list given; the cursor is where the first unfinished one goes on
-- ('' for its first delivery).
--- @include "now_ms"
--- @include "meta"
--- @include "leased_index"
--- @include "lease_out"
--- @include "ending"
--- @include "give_back"
--- @include "group_state"
local changed_channel, changed_message = ARGV[1], ARGV[2]
local grace, left, cursor = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]

local now = now_ms()
open_flow(now)
if flow.on and grace == 0 then
  -- A delivery given back in flow mode also moves its group's counts and place (twice
  -- the commands): half the budget (100 of 100,000 groups' deliveries held Redis
  -- 5.6 ms in `bench limits`).
  left = math.ceil(left / 2)
end
local returned, kept, finished, ends = 0, 0, 0, ending()
for i = 6, #ARGV, 2 do
  if left == 0 then
    break
  end
  local tag, session = ARGV[i], ARGV[i + 1]
  local looked = 0
  cursor = each_leased(tag, cursor, left, function(_, id, meta)
    looked = looked + 1
    if meta and in_flight(meta.state) and meta.tag == tag and meta.session == session then
      if grace > 0 then
        relet(id, meta, now + grace)
        kept = kept + 1
      elseif expire_delivery(ends, id, meta, now) then
        returned = returned + 1
      end
    end
  end)
  left = left - looked
  if cursor ~= '' then
    break
  end
  finished = finished + 1
end
if ends.flush() or returned > 0 then
  redis.call('PUBLISH', changed_channel, changed_message)
end
return {returned, kept, finished, cursor}
