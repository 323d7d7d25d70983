-- cancel.lua: remove tasks that are not in flight (DELAYED, READY or DEAD).
-- KEYS[1..9] as in prelude.lua
-- ARGV: the ids
-- Clock: Redis TIME (the dedupe window; leases that ran out end first).
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (prelude.lua reclaim()); the store runs it again.
-- Returns the ids removed.
local now = now_ms()
-- A task whose lease ran out is no longer in flight: it may be cancelled.
if reclaim(now) then
  return again()
end
local out, done, ends = {}, {}, ending()
for i = 1, #ARGV do
  local id = ARGV[i]
  local meta = not done[id] and load(id)
  if meta and meta.st ~= 'f' then
    done[id] = true
    local member = member_of(meta, id)
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZREM', KEYS[3], member)
    ends.forget(id, meta, now)
    out[#out + 1] = id
  end
end
ends.flush()
return out
