-- prelude.lua: prepended to every lock script. A lock is one string key holding the
-- lease, packed with `struct` (one GET or SET reads or writes all of it; a hash cost
-- an HSET of five fields plus a PEXPIRE, and Lua's share of Redis' time per script is
-- mostly its redis.call()s). The key's PX is the lease, so an expired lease is gone.
-- Layout: token, waited (1 once a waiter asked for a wake-up), fencing, expires_at
-- (Unix ms), owner, request_id ('' for none); strings length-prefixed.
local LEASE = '<Hc0BddHc0Hc0'

-- The lease in a lock value: token, waited, fencing, expires_at, owner, request_id.
local function unpack_lease(value)
  return struct.unpack(LEASE, value)
end

local function pack_lease(token, waited, fencing, expires_at, owner, request_id)
  return struct.pack(LEASE, #token, token, waited, fencing, expires_at, #owner, owner,
    #request_id, request_id)
end
