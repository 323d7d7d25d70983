-- load.lua: a task's meta by id, as a table (nil when there is none), and its write.
--- @include "keys"
--- @include "meta"
--- @include "bulk"
local function load(id)
  local raw = redis.call('HGET', tasks, id)
  if not raw then
    return nil
  end
  return decode(raw)
end

local function store(id, meta)
  redis.call('HSET', tasks, id, encode(meta))
end

-- The metas of ids (false where there is none).
local function load_many(ids)
  local metas = hmget(tasks, ids)
  for n = 1, #ids do
    metas[n] = metas[n] and decode(metas[n])
  end
  return metas
end
