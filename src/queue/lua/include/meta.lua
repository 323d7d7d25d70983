-- meta.lua: a task's meta, packed with struct (a script's cost here is Lua, not the
-- commands it runs: on Redis 7.0, cjson.encode of a meta took 6.3 us and tostring() of
-- a 13-digit number 1-2 us, against 1.4 us for struct.pack and about 1 us a
-- redis.call). The layout is defined here and nowhere else: scripts read and write
-- metas only through meta_fields()/pack_fields() (positional, for the hot loops),
-- decode()/encode() (a table) and size_of().
-- Fields, in layout order: seq (the 15-digit string of its pending member), due,
-- enqueued_at (Unix ms), attempt, max_attempts, dedupe_ms (the dedupe window), size
-- (payload bytes), lease_end (0 none), state (PENDING, IN_FLIGHT, STOPPING, DEAD,
-- COMPLETED or CANCELLED), receipt, tag (the Subscribe stream's tag it is leased to), session (that
-- stream's session), priority (0-9), group ('' for the ungrouped tasks), leased_at (when its current or
-- last delivery began, Unix ms; 0 before the first). leased_at came last and later: a
-- meta written before it has none, and reads as 0.
-- Strings hold no NUL (ids, tags and receipts refuse control characters); '' stands
-- for none.
local META_HEAD = '<c15dddddd'           -- seq, due, enqueued_at, attempt, max_attempts,
                                         -- dedupe_ms, size
local META = META_HEAD .. 'dc1sssds'     -- then lease_end, state, receipt, tag, session,
                                         -- priority, group
local META_FULL = META .. 'd'            -- then leased_at

-- The states, as one byte each (COMPLETED and CANCELLED: kept after the end).
-- STOPPING is IN_FLIGHT with a cancel asked for (Cancel.running): a live delivery
-- whose end, however it comes, ends the task as CANCELLED (include/cancelling.lua).
local PENDING, IN_FLIGHT, DEAD, COMPLETED, CANCELLED = 'p', 'f', 'd', 'c', 'x'
local STOPPING = 'k'

-- Whether a state is a delivery's (IN_FLIGHT, or STOPPING).
local function in_flight(state)
  return state == IN_FLIGHT or state == STOPPING
end

-- A packed meta's fields, in layout order, up to group (then the position after it).
local function meta_fields(raw)
  return struct.unpack(META, raw)
end

-- Packs fields given in layout order.
local function pack_fields(seq, due, enqueued_at, attempt, max_attempts, dedupe_ms, size,
    lease_end, state, receipt, tag, session, priority, group, leased_at)
  return struct.pack(META_FULL, seq, due, enqueued_at, attempt, max_attempts, dedupe_ms,
    size, lease_end, state, receipt, tag, session, priority, group, leased_at)
end

-- A packed meta's payload size, without unpacking the strings after it.
local function size_of(raw)
  local _, _, _, _, _, _, size = struct.unpack(META_HEAD, raw)
  return size
end

local function encode(meta)
  return pack_fields(meta.seq, meta.due, meta.enqueued_at, meta.attempt, meta.max_attempts,
    meta.dedupe_ms, meta.size, meta.lease_end or 0, meta.state, meta.receipt or '',
    meta.tag or '', meta.session or '', meta.priority or 0, meta.group or '',
    meta.leased_at or 0)
end

local function none_if_empty(text)
  if text == '' then
    return nil
  end
  return text
end

local function decode(raw)
  local seq, due, enqueued_at, attempt, max_attempts, dedupe_ms, size, lease_end, state,
    receipt, tag, session, priority, group, at = meta_fields(raw)
  local leased_at = 0
  if at <= #raw then
    leased_at = struct.unpack('<d', raw, at)
  end
  return {seq = seq, due = due, enqueued_at = enqueued_at, attempt = attempt,
    max_attempts = max_attempts, dedupe_ms = dedupe_ms, size = size, lease_end = lease_end,
    state = state, receipt = none_if_empty(receipt), tag = none_if_empty(tag),
    session = none_if_empty(session), priority = priority, group = group,
    leased_at = leased_at}
end
