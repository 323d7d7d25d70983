-- free_lock.lua: ends a lease (deletes the lock key and its name's entry in the index
-- of held locks) and, when a waiter or a watcher
-- marked the lease (`waited` not 0), publishes the lock key on the lock-released
-- channel, so that one waiter per replica wakes at once, and every watcher. Release
-- and ReleaseAll end a lease this one way.
local function free_lock(lock, waited, released_channel, index, name)
  redis.call('DEL', lock)
  redis.call('ZREM', index, name)
  if waited ~= 0 then
    redis.call('PUBLISH', released_channel, lock)
  end
end
