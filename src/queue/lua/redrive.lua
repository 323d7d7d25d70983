-- redrive.lua: move DEAD tasks back to READY with their attempts reset; at most
-- ARGV[3] tasks per run, so one run never blocks Redis for long (the store calls it
-- again until the dead set is drained).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, ARGV[3] the most DEAD
-- tasks to take when no ids are given, then the ids (none: the oldest DEAD tasks)
-- Clock: Redis TIME, only to return leases that ran out first (a task whose last
-- lease ran out is DEAD, whether or not a Lease noticed yet). A dead task's due time
-- is in the past, so it is READY at once.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns {moved, looked at}: a run of all DEAD tasks that looked at ARGV[3] of
-- them may have left more.
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "load"
--- @include "reclaim"
--- @include "group_state"
--- @include "promote"
local changed_channel, changed_message, most = ARGV[1], ARGV[2], tonumber(ARGV[3])

local now = now_ms()
open_flow(now)
if reclaim(now) then
  return again()
end
local ids, members = {}, nil
if #ARGV > 3 then
  for i = 4, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
else
  members = redis.call('ZRANGE', dead, 0, most - 1)
  for n, entry in ipairs(members) do
    ids[n] = id_of(entry)
  end
end
local moved = 0
local gone, back, writes, r = {}, {}, {}, readying()
for n, id in ipairs(ids) do
  local meta = load(id)
  if meta and meta.state == DEAD then
    local entry = member_of(meta, id)
    meta.state = PENDING
    meta.attempt = 0
    gone[#gone + 1] = entry
    if flow.on then
      count_group(meta.group, G_WAITING, 1)
      count_group(meta.group, G_DEAD, -1)
    end
    if flow.on and meta.due <= now then
      r.add(id, meta.seq, meta.priority, meta.due, meta.group)
    else
      back[#back + 1] = string.format('%d', meta.due)
      back[#back + 1] = entry
    end
    writes[#writes + 1] = id
    writes[#writes + 1] = encode(meta)
    moved = moved + 1
  elseif members then
    -- A dead-set member with no dead task behind it: drop it, or the store's next
    -- run would look at it again.
    gone[#gone + 1] = members[n]
  end
end
if #gone > 0 then
  bulk('ZREM', dead, gone)
end
if moved > 0 then
  if #back > 0 then
    bulk('ZADD', pending, back)
  end
  bulk('HSET', tasks, writes)
  r.place()
  redis.call('PUBLISH', changed_channel, changed_message)
end
return {moved, #ids}
