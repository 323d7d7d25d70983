-- wait_again.lua: a task that waits again (given back, redriven) put where it waits.
--- @include "keys"
--- @include "member"
--- @include "group_state"
--- @include "promote"

-- Puts a task that waits again (given back, redriven) where it waits: in flow mode a
-- due one is READY at once, in its group's order.
local function wait_again(id, meta)
  if flow.on and meta.due <= flow.now then
    local r = readying()
    r.add(id, meta.seq, meta.priority, meta.due, meta.group)
    r.place()
  else
    redis.call('ZADD', pending, string.format('%d', meta.due), member_of(meta, id))
  end
end
