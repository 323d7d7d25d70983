-- prelude.lua: shared by every queue script (prepended in Rust, so each script is
-- still one atomic EVALSHA).
-- Queue keys, all under the queue's hash tag:
--   KEYS[1] pending   zset  member "<15-digit seq>:<id>", score = due (Unix ms);
--                           due <= now is READY, later is DELAYED
--   KEYS[2] inflight  zset  same members, score = lease end (Unix ms)
--   KEYS[3] dead      zset  same members, score = due (Unix ms)
--   KEYS[4] tasks     hash  id -> meta, packed by encode() below
--   KEYS[5] payloads  hash  id -> payload bytes
--   KEYS[6] reserved  zset  id -> until (Unix ms): ids held by a dedupe window
--   KEYS[7] seq       string, the enqueue counter (ties leave in enqueue order)
--   KEYS[8] leased    zset  "<tag>\0<id>", all score 0: Subscribe deliveries by tag, so a
--                           stream's count (ZLEXCOUNT) and tasks (ZRANGEBYLEX) are cheap
--   KEYS[9] counters  hash  dead -> tasks that ever went DEAD (the dead-letter metric)
-- Clock: Redis TIME, in ms.
--
-- Speed: a script's cost here is Lua, not the commands it runs (measured on Redis
-- 7.0: cjson.encode of a meta 6.3 us, tostring() of a 13-digit number 1-2 us, a
-- redis.call about 1 us, against under 1 us for the HSET itself). So metas are packed
-- with struct (1.4 us, no number formatting), and the hot scripts (enqueue, dispatch,
-- ack) read with one HMGET and write with one variadic command per key.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A task's meta: seq (the 15-digit string of its pending member), due, enq (Unix
-- ms), att, max, dd (dedupe window ms), size (payload bytes), lexp (lease end, 0
-- none), st ('p' pending, 'f' in flight, 'd' dead), rcpt (receipt), w (the Subscribe
-- tag it is leased to), s (that stream's session). Strings hold no NUL (ids, tags
-- and receipts refuse control characters); '' stands for none.
-- The layout is defined here and nowhere else: scripts read and write metas only
-- through meta_fields()/pack_fields() (positional, for the hot loops), decode()/
-- encode() (a table) and size_of().
local META_HEAD = '<c15dddddd'           -- seq, due, enq, att, max, dd, size
local META = META_HEAD .. 'dc1sss'       -- then lexp, st, rcpt, w, s

-- A packed meta's fields, in layout order: seq, due, enq, att, max, dd, size, lexp,
-- st, rcpt, w, s.
local function meta_fields(raw)
  return struct.unpack(META, raw)
end

-- Packs fields given in layout order.
local function pack_fields(seq, due, enq, att, max, dd, size, lexp, st, rcpt, w, s)
  return struct.pack(META, seq, due, enq, att, max, dd, size, lexp, st, rcpt, w, s)
end

-- A packed meta's payload size, without unpacking the strings after it.
local function size_of(raw)
  local _, _, _, _, _, _, size = struct.unpack(META_HEAD, raw)
  return size
end

local function encode(meta)
  return pack_fields(meta.seq, meta.due, meta.enq, meta.att, meta.max, meta.dd,
    meta.size, meta.lexp or 0, meta.st, meta.rcpt or '', meta.w or '', meta.s or '')
end

local function none_if_empty(s)
  if s == '' then
    return nil
  end
  return s
end

local function decode(raw)
  local seq, due, enq, att, max, dd, size, lexp, st, rcpt, w, s = meta_fields(raw)
  return {seq = seq, due = due, enq = enq, att = att, max = max, dd = dd, size = size,
    lexp = lexp, st = st, rcpt = none_if_empty(rcpt), w = none_if_empty(w), s = none_if_empty(s)}
end

-- A task's member in pending, inflight and dead: "<seq>:<id>".
local function member(seq, id)
  return seq .. ':' .. id
end

local function member_of(meta, id)
  return member(meta.seq, id)
end

local function id_of(member)
  return string.sub(member, 17)
end

local function load(id)
  local raw = redis.call('HGET', KEYS[4], id)
  if not raw then
    return nil
  end
  return decode(raw)
end

local function store(id, meta)
  redis.call('HSET', KEYS[4], id, encode(meta))
end

-- Runs a variadic command on key with args, in chunks that stay under Lua's stack
-- limit for unpack() (an even size, so field-value and score-member pairs stay whole).
local function bulk(command, key, args)
  local n = #args
  for from = 1, n, 4000 do
    redis.call(command, key, unpack(args, from, math.min(from + 3999, n)))
  end
end

-- The values of fields ids in hash key (false where there is none), by HMGET.
local function hmget(key, ids)
  local values = {}
  for from = 1, #ids, 4000 do
    local got = redis.call('HMGET', key, unpack(ids, from, math.min(from + 3999, #ids)))
    for i, value in ipairs(got) do
      values[from + i - 1] = value
    end
  end
  return values
end

-- The metas of ids (false where there is none).
local function load_many(ids)
  local metas = hmget(KEYS[4], ids)
  for n = 1, #ids do
    metas[n] = metas[n] and decode(metas[n])
  end
  return metas
end

-- The id a receipt names: receipts are "<random>:<id>".
local function receipt_id(receipt)
  local at = string.find(receipt, ':', 1, true)
  if not at then
    return nil
  end
  return string.sub(receipt, at + 1)
end

-- Whether a meta's fields (state, receipt, lease end) are a live delivery for this
-- receipt: in flight, not expired, not redelivered.
local function live_fields(st, rcpt, lexp, receipt, now)
  return st == 'f' and rcpt == receipt and lexp > now
end

-- Whether meta is a live delivery for this receipt (not expired, redelivered or gone).
local function live(meta, receipt, now)
  return meta and live_fields(meta.st, meta.rcpt, meta.lexp, receipt, now)
end

-- A live delivery for this receipt, or nil (stale: expired, redelivered or gone).
local function delivery(receipt, now)
  local id = receipt_id(receipt)
  if not id then
    return nil
  end
  local meta = load(id)
  if not live(meta, receipt, now) then
    return nil
  end
  return id, meta
end

-- The lex range of a Subscribe tag's entries in KEYS[8]. Tags hold no control
-- characters, so "\1" ends the range before any longer tag's entries begin.
local function tag_range(tag)
  return '[' .. tag .. '\0', '(' .. tag .. '\1'
end

-- A Subscribe delivery's member in KEYS[8].
local function leased_entry(tag, id)
  return tag .. '\0' .. id
end

-- The lowest score in a sorted set, or -1 when it is empty.
local function first_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2])
  end
  return -1
end

-- Takes a pending task out for a delivery (the caller removes its pending member):
-- attempt + 1.
local function take(meta)
  meta.att = meta.att + 1
  meta.st = 'f'
end

-- The receipt of a delivery: "<prefix>:<id>". The prefix is random per call and a
-- call delivers an id once, so it names this one delivery.
local function receipt_of(prefix, id)
  return prefix .. ':' .. id
end

-- Leases a taken task until lexp; with a Subscribe tag, to that stream (its
-- session). Only the meta changes: the caller writes it and the inflight (and leased)
-- entries.
local function lease_out(id, meta, prefix, lexp, tag, session)
  meta.rcpt = receipt_of(prefix, id)
  meta.lexp = lexp
  meta.w = tag
  meta.s = session
end

-- Writes a round of deliveries: the first `taken` pending members out (they are the
-- head of ZRANGEBYSCORE -inf..now, so by rank: no member strings sent back), then the
-- new metas (id, packed meta pairs) and inflight entries (lease end, member pairs).
local function write_deliveries(taken, writes, leases)
  if taken > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, taken - 1)
  end
  if #writes > 0 then
    bulk('HSET', KEYS[4], writes)
    bulk('ZADD', KEYS[2], leases)
  end
end

-- Moves a live delivery's lease end to lexp (same receipt).
local function relet(id, meta, lexp)
  meta.lexp = lexp
  store(id, meta)
  redis.call('ZADD', KEYS[2], 'XX', lexp, member_of(meta, id))
end

-- Calls visit(entry, id, meta) for each Subscribe delivery indexed under tag (meta
-- nil when the task is gone).
local function each_leased(tag, visit)
  for _, entry in ipairs(redis.call('ZRANGEBYLEX', KEYS[8], tag_range(tag))) do
    local id = string.sub(entry, #tag + 2)
    visit(entry, id, load(id))
  end
end

-- Gathers the writes that end deliveries and remove finished tasks over a script, and
-- sends them as one variadic command per key on flush(). A caller flushes before it
-- reads inflight, leased, tasks or payloads again, and handles each id once.
local function ending()
  local inflight, leased, gone, windows = {}, {}, {}, {}
  local e = {}
  -- Ends a delivery's lease records (inflight and the Subscribe index), from its
  -- meta's seq and tag (w: nil or '' for none).
  function e.unlease_fields(id, seq, w)
    inflight[#inflight + 1] = member(seq, id)
    if w and w ~= '' then
      leased[#leased + 1] = leased_entry(w, id)
    end
  end
  function e.unlease(id, meta)
    e.unlease_fields(id, meta.seq, meta.w)
  end
  -- Removes a finished task; its id stays reserved for its dedupe window (dd ms).
  function e.forget_fields(id, dd, now)
    gone[#gone + 1] = id
    if dd > 0 then
      windows[#windows + 1] = string.format('%d', now + dd)
      windows[#windows + 1] = id
    end
  end
  function e.forget(id, meta, now)
    e.forget_fields(id, meta.dd, now)
  end
  function e.flush()
    if #inflight > 0 then
      bulk('ZREM', KEYS[2], inflight)
    end
    if #leased > 0 then
      bulk('ZREM', KEYS[8], leased)
    end
    if #gone > 0 then
      bulk('HDEL', KEYS[4], gone)
      bulk('HDEL', KEYS[5], gone)
    end
    if #windows > 0 then
      bulk('ZADD', KEYS[6], windows)
    end
  end
  return e
end

-- A delivery that ended without an ack: back to pending at `due`, or dead when out
-- of attempts. The caller ended its lease (ending().unlease).
local function give_back(id, meta, due)
  meta.rcpt = nil
  meta.lexp = nil
  meta.w = nil
  meta.s = nil
  if meta.att >= meta.max then
    meta.st = 'd'
    redis.call('ZADD', KEYS[3], meta.due, member_of(meta, id))
    redis.call('HINCRBY', KEYS[9], 'dead', 1)
  else
    meta.st = 'p'
    meta.due = due
    redis.call('ZADD', KEYS[1], due, member_of(meta, id))
  end
  store(id, meta)
  return meta.st
end

-- A delivery that ended without an ack as a lease expiry ends it: its lease records
-- go (through ends), and the task is back at its original due time, or dead on its
-- last attempt. True when it went back to pending.
local function expire_delivery(ends, id, meta)
  ends.unlease(id, meta)
  return give_back(id, meta, meta.due) == 'p'
end

-- The most expired leases one run returns: a few ms of work, so no run blocks Redis
-- for long however many leases ran out at once.
local RECLAIM_PER_RUN = 1000

-- Expired leases go back (at their original due time) or die, at most
-- RECLAIM_PER_RUN of them. True when it returned that many, so more may be waiting:
-- the script then does nothing else and answers AGAIN (see again()), and its store
-- runs it again, so nothing after this ever sees a lease that ran out as live.
local function reclaim(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, RECLAIM_PER_RUN)
  local ends, orphans = ending(), {}
  for _, member in ipairs(expired) do
    local id = id_of(member)
    local meta = load(id)
    if meta then
      expire_delivery(ends, id, meta)
    else
      orphans[#orphans + 1] = member
    end
  end
  ends.flush()
  if #orphans > 0 then
    bulk('ZREM', KEYS[2], orphans)
  end
  return #expired == RECLAIM_PER_RUN
end

-- The answer of a script that only returned expired leases this run (reclaim() said
-- more may be waiting): its store runs it again.
local function again()
  return redis.status_reply('AGAIN')
end

-- The leading members whose payloads fit in budget bytes (the first always does, so
-- a reply is never empty), as arrays: ids, packed metas (false where gone), payloads.
-- Sizes come from the metas, so only the payloads returned are read; the metas stay
-- packed, for the caller to unpack as it needs (a table per task costs more than the
-- commands that move it).
local function within_budget(members, budget)
  local ids = {}
  for n, member in ipairs(members) do
    ids[n] = id_of(member)
  end
  local raws = hmget(KEYS[4], ids)
  local used, taken = 0, 0
  for n, id in ipairs(ids) do
    used = used + (raws[n] and size_of(raws[n]) or 0) + #id + 128
    if n > 1 and used > budget then
      break
    end
    taken = n
  end
  for n = #ids, taken + 1, -1 do
    ids[n] = nil
    raws[n] = nil
  end
  return ids, raws, hmget(KEYS[5], ids)
end

-- Appends one task as a reply row to out: id, payload, state, due, enq, att, max,
-- receipt, lease end.
local function push_fields(out, id, payload, state, due, enq, att, max, rcpt, lexp)
  local n = #out
  out[n + 1] = id
  out[n + 2] = payload or ''
  out[n + 3] = state
  out[n + 4] = due
  out[n + 5] = enq
  out[n + 6] = att
  out[n + 7] = max
  out[n + 8] = rcpt
  out[n + 9] = lexp
end

-- push_fields() for a meta, its state derived from st and due.
local function push_row(out, id, meta, payload, now)
  local state = 'ready'
  if meta.st == 'f' then
    state = 'in_flight'
  elseif meta.st == 'd' then
    state = 'dead'
  elseif meta.due > now then
    state = 'delayed'
  end
  push_fields(out, id, payload, state, meta.due, meta.enq, meta.att, meta.max,
    meta.rcpt or '', meta.lexp or 0)
end

