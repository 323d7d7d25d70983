-- prune.lua: removes the holders whose lease ended (their permits come back) and the
-- line entries whose lease ended (their waiter gave up without a word, or its server
-- died). At most PRUNE of each per run, so no run's work grows with the data; what is
-- left is removed by the next runs (until then a holder whose lease ended still counts,
-- which can only keep permits out, never hand out too many).
-- Returns whether anything was removed (the head of the line may be able to go now).
--- @include "holder"
local PRUNE = 100

local function prune(sem, holders, line, leases, now_ms)
  local changed = false
  local ended = redis.call('ZRANGE', holders, '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, PRUNE)
  for _, token in ipairs(ended) do
    local value = redis.call('HGET', sem, 'h:' .. token)
    if value then
      local permits, _, _, owner, request_id = unpack_holder(value)
      drop_holder(sem, holders, token, permits, owner, request_id)
    else
      redis.call('ZREM', holders, token)
    end
    changed = true
  end
  local gone = redis.call('ZRANGE', leases, '-inf', now_ms, 'BYSCORE', 'LIMIT', 0, PRUNE)
  if #gone > 0 then
    redis.call('ZREM', line, unpack(gone))
    redis.call('ZREM', leases, unpack(gone))
    changed = true
  end
  return changed
end
