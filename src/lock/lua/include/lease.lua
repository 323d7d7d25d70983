-- lease.lua: a lock is one string key holding the lease, packed with `struct` (one GET
-- or SET reads or writes all of it; a hash would cost an HSET of five fields plus a
-- PEXPIRE, and Lua's share of Redis' time per script is mostly its redis.call()s). The
-- key's PX is the lease, so an expired lease is gone.
-- Layout: token, waited (marks: WAITER once a waiter asked for a wake-up, plus WATCHER
-- once a Watch stream did; either makes the lease's end publish), fencing, expires_at
-- (Unix ms), owner, request_id ('' for none); strings length-prefixed. Then, only once
-- a Hold stream re-attached, the attach generation (a double): absent means 0, so a
-- lease never re-attached costs no byte more.
-- The layout is defined here and nowhere else.
local LEASE = '<Hc0BddHc0Hc0'
-- The marks of `waited`.
local WAITER, WATCHER = 1, 2

-- The lease in a lock value: token, waited, fencing, expires_at, owner, request_id,
-- attach generation.
local function unpack_lease(value)
  local token, waited, fencing, expires_at, owner, request_id, rest =
    struct.unpack(LEASE, value)
  local attach = 0
  if rest <= #value then
    attach = struct.unpack('<d', value, rest)
  end
  return token, waited, fencing, expires_at, owner, request_id, attach
end

local function pack_lease(token, waited, fencing, expires_at, owner, request_id, attach)
  local value = struct.pack(LEASE, #token, token, waited, fencing, expires_at, #owner,
    owner, #request_id, request_id)
  if attach and attach > 0 then
    value = value .. struct.pack('<d', attach)
  end
  return value
end
