-- unplace.lua: a waiting (or kept) task taken out of wherever it is (cancelled, replaced).
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "group_state"
--- @include "rotation"

-- Removes a waiting (not in flight) task from wherever it waits; its group is
-- considered again when it was the task the group had to deliver next. True then:
-- the caller tells the dispatchers (the group's next task may go now).
local function unplace(id, meta)
  local entry = member_of(meta, id)
  if meta.state == COMPLETED then
    redis.call('ZREM', completed, entry)
    return false
  elseif meta.state == CANCELLED then
    redis.call('ZREM', cancelled, entry)
    return false
  end
  redis.call('ZREM', pending, entry)
  redis.call('ZREM', dead, entry)
  if flow.on then
    count_group(meta.group, meta.state == DEAD and G_DEAD or G_WAITING, -1)
    redis.call('ZREM', ranked, entry)
    redis.call('ZREM', ready,
      ready_entry(meta.group, meta.priority, meta.due, meta.seq, id))
    local head = gfield(meta.group, G_HEAD)
    if redis.call('HGET', groups, head) == id then
      redis.call('HDEL', groups, head)
      consider(meta.group)
      return true
    end
  end
  return false
end
