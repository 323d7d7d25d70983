-- attempts.lua: a task's delivery history (the `attempts` hash, id -> its attempts,
-- oldest first). Each attempt is packed as ATTEMPT (number, leased_at, ended_at: Unix
-- ms; outcome: one byte; then the byte lengths of its worker_id and error) followed by
-- those two strings; src/queue/replies.rs decodes it. Written when a delivery ends
-- and the task stays (a Nack, a lease that ran out or a stream that closed, a cancel
-- of a running task, an Ack that keeps the task): an Ack of a task that is not kept
-- writes nothing, so a queue that keeps nothing pays nothing here on its hot path.
-- Bounded: the last WHOLE_ERRORS errors stay whole, older ones are cut to
-- CUT_ERROR_BYTES; at most MAX_ATTEMPTS attempts (a task redriven again and again
-- drops its oldest).
--- @include "keys"
local ATTEMPT = '<I4ddc1I4I4'
-- The outcomes, as one byte each.
local OUT_ACKED, OUT_NACKED, OUT_EXPIRED, OUT_GAVE_UP, OUT_CANCELLED = 'a', 'n', 'e', 'g', 'c'
local WHOLE_ERRORS = 5
local CUT_ERROR_BYTES = 200
local MAX_ATTEMPTS = 100
-- What ends an error that was cut (the same mark src/queue/model.rs's CUT_MARK is).
local CUT_MARK = '\226\128\166[cut]'

-- `text` cut to at most `limit` bytes at a UTF-8 boundary and marked; unchanged when it
-- fits (or was cut to this bound before).
local function cut_text(text, limit)
  if #text <= limit or (#text <= limit + #CUT_MARK and text:sub(-#CUT_MARK) == CUT_MARK) then
    return text
  end
  local n = limit
  -- Byte n + 1 is the first one dropped: while it continues a character, that
  -- character would be split, so it goes too.
  while n > 0 and text:byte(n + 1) >= 0x80 and text:byte(n + 1) < 0xC0 do
    n = n - 1
  end
  return text:sub(1, n) .. CUT_MARK
end

local function pack_attempt(number, leased_at, ended_at, outcome, worker, failure)
  return struct.pack(ATTEMPT, number, leased_at, ended_at, outcome, #worker, #failure) ..
    worker .. failure
end

-- The worker_id a delivery's Subscribe tag names ('' for a stream without one and for
-- Lease).
local function worker_of(tag)
  if tag and tag:sub(1, 2) == 'w:' then
    return tag:sub(3)
  end
  return ''
end

-- A history with room for one more attempt (the oldest dropped at MAX_ATTEMPTS) and,
-- when that one brings an error, the errors before the last WHOLE_ERRORS - 1 cut.
local function make_room(old, with_error)
  local parts, errors_at = {}, {}
  local at = 1
  while at <= #old do
    local number, leased_at, ended_at, outcome, worker_len, error_len, body =
      struct.unpack(ATTEMPT, old, at)
    local worker = old:sub(body, body + worker_len - 1)
    local failure = old:sub(body + worker_len, body + worker_len + error_len - 1)
    parts[#parts + 1] = {number, leased_at, ended_at, outcome, worker, failure}
    if error_len > 0 then
      errors_at[#errors_at + 1] = #parts
    end
    at = body + worker_len + error_len
  end
  local first = math.max(1, #parts - MAX_ATTEMPTS + 2)
  local whole_from = #errors_at - WHOLE_ERRORS + 2
  if with_error then
    for k = 1, whole_from - 1 do
      local part = parts[errors_at[k]]
      part[6] = cut_text(part[6], CUT_ERROR_BYTES)
    end
  end
  local out = {}
  for k = first, #parts do
    out[#out + 1] = pack_attempt(unpack(parts[k]))
  end
  return table.concat(out)
end

-- Appends the delivery `meta` describes (before its lease fields are cleared) as ending
-- at `now` with `outcome` and `failure` ('' or nil for none).
local function record_attempt(id, meta, now, outcome, failure)
  failure = failure or ''
  local record = pack_attempt(meta.attempt, meta.leased_at or 0, now, outcome,
    worker_of(meta.tag), failure)
  local old = redis.call('HGET', attempts, id)
  if old then
    -- Parsing is needed only to cut or drop: without a new error, a history shorter
    -- than MAX_ATTEMPTS - 1 of the smallest attempts stays as it is.
    if failure ~= '' or #old >= struct.size(ATTEMPT) * (MAX_ATTEMPTS - 1) then
      old = make_room(old, failure ~= '')
    end
    record = old .. record
  end
  redis.call('HSET', attempts, id, record)
end
