-- dispatch_to.lua: leases READY tasks to Subscribe streams, one task at a time round
-- the streams (in the order given) while they have free slots: the body of
-- dispatch.lua, shared with enqueue_and_dispatch.lua (an enqueue that hands its tasks
-- to this replica's idle streams in the same run).
-- `args[first..last]` hold 4 values per stream: tag, session, max_in_flight,
-- visibility ms. `now` / `now_us` are Redis TIME (ms / µs), the run has already
-- reclaimed expired leases and (in flow mode) promoted due tasks.
-- Returns dispatch.lua's reply (its header says what it holds), how many tasks it
-- leased, and the ids it took with their packed metas (a nil meta: the task was
-- gone, and nothing was leased for it).
--- @include "keys"
--- @include "meta"
--- @include "bulk"
--- @include "receipt"
--- @include "leased_index"
--- @include "within_budget"
--- @include "lease_out"
--- @include "first_score"
--- @include "push_row"
--- @include "rotation"
--- @include "pick"
--- @include "next_start"
local function dispatch_to(now, now_us, receipt_prefix, budget, args, first, last)
  local streams = {}
  local free_total = 0
  for i = first, last, 4 do
    local tag = args[i]
    local held = redis.call('ZLEXCOUNT', leased, tag_range(tag))
    local free = math.max(tonumber(args[i + 2]) - held, 0)
    local lease_end = now + tonumber(args[i + 3])
    -- Scores go to ZADD as strings: converting a Lua number costs more than the ZADD.
    streams[#streams + 1] = {tag = tag, session = args[i + 1], lease_end = lease_end,
      lease_end_score = string.format('%d', lease_end), held = held, free = free}
    free_total = free_total + free
  end
  -- The pending members to deliver, their ids, packed metas, payloads, last errors and
  -- progress.
  local due, ids, raws, bodies, failures, progresses = {}, {}, {}, {}, {}, {}
  local retry_at, held_back = nil, ''
  if flow.on then
    wake_groups(now)
    if free_total > 0 then
      due, ids, raws, retry_at, held_back = pick(free_total, budget, now, false)
      bodies, failures, progresses = hmget(payloads, ids), hmget(errors, ids),
        hmget(progress, ids)
    end
  else
    if free_total > 0 then
      due = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0,
        math.min(free_total, PLAIN_RUN_DELIVERIES))
    end
    ids, raws, bodies, failures, progresses = within_budget(due, budget)
  end
  -- Round robin: #ids <= free_total, so the inner loop always finds a stream with a
  -- free slot. The rows go straight into the reply after its head (filled in last).
  -- Each task is handled in locals, not a meta table: this loop is most of the
  -- script's time, and a table per task (with its garbage) cost more than its commands.
  local out = {now_us, -1, -1, held_back}
  for n = 1, #streams do
    out[4 + n] = 0
  end
  local writes, leases, entries = {}, {}, {}
  local nw = 0
  local k = 1
  for n, id in ipairs(ids) do
    local raw = raws[n]
    if raw then
      while streams[k].free == 0 do
        k = k % #streams + 1
      end
      local stream = streams[k]
      stream.free = stream.free - 1
      stream.held = stream.held + 1
      nw = nw + 2
      writes[nw - 1] = id
      -- The stream's index, then the task's row.
      out[#out + 1] = k
      writes[nw] = lease_packed(out, id, raw, receipt_prefix, stream.lease_end, stream.tag,
        stream.session, now, bodies[n], failures[n], progresses[n])
      leases[nw - 1] = stream.lease_end_score
      leases[nw] = due[n]
      entries[nw - 1] = '0'
      entries[nw] = leased_entry(stream.tag, id)
      k = k % #streams + 1
    end
  end
  write_deliveries(flow.on and 0 or #ids, writes, leases)
  if #entries > 0 then
    bulk('ZADD', leased, entries)
  end
  if flow.on then
    out[2] = next_start(now, retry_at)
  else
    out[2] = first_score(pending)
  end
  out[3] = first_score(inflight)
  for n, stream in ipairs(streams) do
    out[4 + n] = stream.held
  end
  return out, nw / 2, ids, raws
end
