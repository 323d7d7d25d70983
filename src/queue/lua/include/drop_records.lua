-- drop_records.lua: the records of tasks that go for good without being waited for
-- again (pruned by a retention, include/keep.lua and include/keep_dead.lua): meta,
-- payload, last error, progress, history and result. (The hot path's removals batch
-- their own, include/ending.lua.)
--- @include "keys"
--- @include "bulk"
local function drop_records(ids)
  bulk('HDEL', tasks, ids)
  bulk('HDEL', payloads, ids)
  bulk('HDEL', errors, ids)
  bulk('HDEL', progress, ids)
  bulk('HDEL', attempts, ids)
  bulk('HDEL', results, ids)
end
