-- dispatch.lua: lease READY tasks to Subscribe streams, one task at a time round the
-- streams (in the order given) while they have free slots, first returning expired
-- leases. A stream's free slots are its max_in_flight less the deliveries its tag
-- holds now (on any replica), so an Ack anywhere frees a slot without telling us.
-- KEYS[1..8] as in prelude.lua
-- ARGV[1] receipt prefix (random, per call), ARGV[2] the most payload bytes to
-- return (always at least one task), then 4 per stream: tag, session,
-- max_in_flight, visibility ms
-- Clock: Redis TIME.
-- Returns {now, next_pending, next_lease_end, held_1..held_n, rows...}: next_* are -1
-- when none; held_i is stream i's deliveries after this call; then 10 per task:
-- the stream's index (1-based), then prelude.lua's row().
local now = now_ms()
reclaim(now)
local streams = {}
local free_total = 0
for i = 3, #ARGV, 4 do
  local tag = ARGV[i]
  local held = redis.call('ZLEXCOUNT', KEYS[8], tag_range(tag))
  local free = math.max(tonumber(ARGV[i + 2]) - held, 0)
  table.insert(streams, {tag = tag, session = ARGV[i + 1], vis = tonumber(ARGV[i + 3]), held = held, free = free})
  free_total = free_total + free
end
local due = {}
if free_total > 0 then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, free_total)
end
-- Round robin: stream k gets due[n] when owner[n] == k. #due <= free_total, so the
-- inner loop always finds a stream with a free slot.
local owner = {}
local k = 1
for n = 1, #due do
  while streams[k].free == 0 do
    k = k % #streams + 1
  end
  owner[n] = k
  streams[k].free = streams[k].free - 1
  k = k % #streams + 1
end
local rows = {}
each_within_budget(due, tonumber(ARGV[2]), function(member, id, meta, payload, n)
  local stream = streams[owner[n]]
  take(member, meta)
  lease_out(member, id, meta, ARGV[1], n, now + stream.vis, stream.tag, stream.session)
  stream.held = stream.held + 1
  table.insert(rows, owner[n])
  for _, v in ipairs(row(id, meta, payload, now)) do
    table.insert(rows, v)
  end
end)
local out = {now, first_score(KEYS[1]), first_score(KEYS[2])}
for _, stream in ipairs(streams) do
  table.insert(out, stream.held)
end
for _, v in ipairs(rows) do
  table.insert(out, v)
end
return out
