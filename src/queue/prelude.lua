-- prelude.lua: shared by every queue script (prepended in Rust, so each script is
-- still one atomic EVALSHA).
-- Queue keys, all under the queue's hash tag:
--   KEYS[1] pending   zset  member "<15-digit seq>:<id>", score = due (Unix ms);
--                           due <= now is READY, later is DELAYED
--   KEYS[2] inflight  zset  same members, score = lease end (Unix ms)
--   KEYS[3] dead      zset  same members, score = due (Unix ms)
--   KEYS[4] tasks     hash  id -> cjson meta {seq, due, enq, att, max, dd, st, rcpt, lexp, w, s}
--                           st: 'p' pending, 'f' in flight, 'd' dead; w: the Subscribe
--                           tag it is leased to, s: that stream's session
--   KEYS[5] payloads  hash  id -> payload bytes
--   KEYS[6] reserved  zset  id -> until (Unix ms): ids held by a dedupe window
--   KEYS[7] seq       string, the enqueue counter (ties leave in enqueue order)
--   KEYS[8] leased    zset  "<tag>\0<id>", all score 0: Subscribe deliveries by tag, so a
--                           stream's count (ZLEXCOUNT) and tasks (ZRANGEBYLEX) are cheap
-- Clock: Redis TIME, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function member_of(meta, id)
  local s = tostring(meta.seq)
  return string.rep('0', 15 - #s) .. s .. ':' .. id
end

local function id_of(member)
  return string.sub(member, 17)
end

local function load(id)
  local raw = redis.call('HGET', KEYS[4], id)
  if not raw then
    return nil
  end
  return cjson.decode(raw)
end

local function store(id, meta)
  redis.call('HSET', KEYS[4], id, cjson.encode(meta))
end

-- The id a receipt names: receipts are "<random>:<id>".
local function receipt_id(receipt)
  local at = string.find(receipt, ':', 1, true)
  if not at then
    return nil
  end
  return string.sub(receipt, at + 1)
end

-- A live delivery for this receipt, or nil (stale: expired, redelivered or gone).
local function delivery(receipt, now)
  local id = receipt_id(receipt)
  if not id then
    return nil
  end
  local meta = load(id)
  if not meta or meta.st ~= 'f' or meta.rcpt ~= receipt or meta.lexp <= now then
    return nil
  end
  return id, meta
end

-- The lex range of a Subscribe tag's entries in KEYS[8]. Tags hold no control
-- characters, so "\1" ends the range before any longer tag's entries begin.
local function tag_range(tag)
  return '[' .. tag .. '\0', '(' .. tag .. '\1'
end

-- Ends a delivery's lease records (inflight and the Subscribe index).
local function unlease(id, meta)
  redis.call('ZREM', KEYS[2], member_of(meta, id))
  if meta.w then
    redis.call('ZREM', KEYS[8], meta.w .. '\0' .. id)
  end
end

-- The lowest score in a sorted set, or -1 when it is empty.
local function first_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2])
  end
  return -1
end

-- Takes a pending task out for a delivery: attempt + 1.
local function take(member, meta)
  redis.call('ZREM', KEYS[1], member)
  meta.att = meta.att + 1
  meta.st = 'f'
end

-- Leases a taken task until lexp under the receipt "<prefix><n hex>:<id>"; with a
-- Subscribe tag, also to that stream (its session) in the leased index.
local function lease_out(member, id, meta, prefix, n, lexp, tag, session)
  meta.rcpt = prefix .. string.format('%x', n) .. ':' .. id
  meta.lexp = lexp
  meta.w = tag
  meta.s = session
  store(id, meta)
  redis.call('ZADD', KEYS[2], lexp, member)
  if tag then
    redis.call('ZADD', KEYS[8], 0, tag .. '\0' .. id)
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

-- A delivery that ended without an ack: back to pending at `due`, or dead when out
-- of attempts. The caller called unlease().
local function give_back(id, meta, due)
  meta.rcpt = nil
  meta.lexp = nil
  meta.w = nil
  meta.s = nil
  if meta.att >= meta.max then
    meta.st = 'd'
    redis.call('ZADD', KEYS[3], meta.due, member_of(meta, id))
  else
    meta.st = 'p'
    meta.due = due
    redis.call('ZADD', KEYS[1], due, member_of(meta, id))
  end
  store(id, meta)
  return meta.st
end

-- Expired leases go back (at their original due time) or die. Bounded per call.
local function reclaim(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  for _, member in ipairs(expired) do
    local id = id_of(member)
    local meta = load(id)
    if meta then
      unlease(id, meta)
      give_back(id, meta, meta.due)
    else
      redis.call('ZREM', KEYS[2], member)
    end
  end
  return #expired
end

-- Removes a finished task; its id stays reserved for its dedupe window.
local function forget(id, meta, now)
  redis.call('HDEL', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  if meta.dd and meta.dd > 0 then
    redis.call('ZADD', KEYS[6], now + meta.dd, id)
  end
end

-- Calls visit(member, id, meta, payload, n) for each member in order while the
-- payloads fit in budget bytes; the first one is always visited, so a reply is
-- never empty.
local function each_within_budget(members, budget, visit)
  local used = 0
  for n, member in ipairs(members) do
    local id = id_of(member)
    local payload = redis.call('HGET', KEYS[5], id) or ''
    used = used + #payload + #id + 128
    if n > 1 and used > budget then
      return
    end
    visit(member, id, load(id), payload, n)
  end
end

-- One task as a reply row: id, payload, state, due, enq, att, max, receipt, lease end.
local function row(id, meta, payload, now)
  local state = 'ready'
  if meta.st == 'f' then
    state = 'in_flight'
  elseif meta.st == 'd' then
    state = 'dead'
  elseif meta.due > now then
    state = 'delayed'
  end
  return {id, payload or '', state, meta.due, meta.enq, meta.att, meta.max, meta.rcpt or '', meta.lexp or 0}
end

