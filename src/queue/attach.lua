-- attach.lua: a Subscribe stream with a worker_id takes over the live deliveries of
-- that worker's tag (from a stream that ended within the re-attach grace, on any
-- replica): same receipts, its own session, lease end now + its visibility.
-- KEYS[1..8] as in prelude.lua
-- ARGV[1] tag, ARGV[2] session, ARGV[3] visibility ms
-- Clock: Redis TIME.
-- Returns 9 per task as prelude.lua's row().
local now = now_ms()
reclaim(now)
local tag = ARGV[1]
local out = {}
for _, entry in ipairs(redis.call('ZRANGEBYLEX', KEYS[8], tag_range(tag))) do
  local id = string.sub(entry, #tag + 2)
  local meta = load(id)
  if meta and meta.st == 'f' and meta.w == tag and meta.lexp > now then
    meta.s = ARGV[2]
    meta.lexp = now + tonumber(ARGV[3])
    store(id, meta)
    redis.call('ZADD', KEYS[2], 'XX', meta.lexp, member_of(meta, id))
    for _, v in ipairs(row(id, meta, redis.call('HGET', KEYS[5], id), now)) do
      table.insert(out, v)
    end
  elseif not meta or meta.w ~= tag then
    redis.call('ZREM', KEYS[8], entry)
  end
end
return out
