-- pack_added.lua: add()'s reply, three numbers per task, as one reply value (decoded by
-- `enqueued` in src/queue/replies.rs): per task, created and replaced (a byte each)
-- and due (a little-endian double). Three values per task cost the server's RESP
-- parser about a thousand instructions each. One struct.pack for a batch of up to
-- 1,000 tasks (queue::MAX_BATCH; unpack's limit is the Lua stack).
local function pack_added(added)
  local n = #added
  if n <= 3000 then
    return struct.pack('<' .. string.rep('BBd', n / 3), unpack(added))
  end
  local parts = {}
  for from = 1, n, 3000 do
    local to = math.min(from + 2999, n)
    parts[#parts + 1] = struct.pack('<' .. string.rep('BBd', (to - from + 1) / 3),
      unpack(added, from, to))
  end
  return table.concat(parts)
end
