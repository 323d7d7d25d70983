-- holder.lua: a semaphore holder, one field `h:<token>` of the semaphore hash, packed
-- with `struct`: permits, fencing, expires_at (Unix ms), owner, request_id ('' for
-- none), attach generation (0 until a Hold stream re-attached; see
-- src/lock/lua/include/lease.lua). A retried Acquire finds its holder through the
-- field `retry_field(owner, request_id)`, which names the token.
-- The layout is defined here and nowhere else.
local HOLDER = '<dddHc0Hc0d'

local function unpack_holder(value)
  local permits, fencing, expires_at, owner, request_id, attach = struct.unpack(HOLDER, value)
  return permits, fencing, expires_at, owner, request_id, attach
end

local function pack_holder(permits, fencing, expires_at, owner, request_id, attach)
  return struct.pack(HOLDER, permits, fencing, expires_at, #owner, owner, #request_id,
    request_id, attach)
end

-- Owners hold no control characters, so NUL cannot occur inside one.
local function retry_field(owner, request_id)
  return 'r:' .. owner .. '\0' .. request_id
end

-- Ends a holder's lease: its permits go back to in_use's count.
local function drop_holder(sem, holders, token, permits, owner, request_id)
  redis.call('HDEL', sem, 'h:' .. token)
  if request_id ~= '' then
    redis.call('HDEL', sem, retry_field(owner, request_id))
  end
  redis.call('ZREM', holders, token)
  if redis.call('HINCRBY', sem, 'in_use', -permits) < 0 then
    redis.call('HSET', sem, 'in_use', 0)
  end
end
