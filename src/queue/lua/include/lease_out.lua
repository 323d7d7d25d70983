-- lease_out.lua: taking a pending task out for a delivery.
--- @include "keys"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "load"
--- @include "receipt"
--- @include "push_row"
-- Takes a pending task out at `now` (the caller removes its pending member): attempt
-- + 1.
local function take(meta, now)
  meta.attempt = meta.attempt + 1
  meta.state = IN_FLIGHT
  meta.leased_at = now
end

-- Leases a taken task until lease_end; with a Subscribe tag, to that stream (its
-- session). Only the meta changes: the caller writes it and the inflight (and
-- leased) entries.
local function lease_out(id, meta, prefix, lease_end, tag, session)
  meta.receipt = receipt_of(prefix, id)
  meta.lease_end = lease_end
  meta.tag = tag
  meta.session = session
end

-- Writes a round of deliveries: the first `taken` pending members out (they are the
-- head of ZRANGEBYSCORE -inf..now, so by rank: no member strings sent back), then the
-- new metas (id, packed meta pairs) and inflight entries (lease end, member pairs).
local function write_deliveries(taken, writes, leases)
  if taken > 0 then
    redis.call('ZREMRANGEBYRANK', pending, 0, taken - 1)
  end
  if #writes > 0 then
    bulk('HSET', tasks, writes)
    bulk('ZADD', inflight, leases)
  end
end

-- Moves a live delivery's lease end to lease_end (same receipt).
local function relet(id, meta, lease_end)
  meta.lease_end = lease_end
  store(id, meta)
  redis.call('ZADD', inflight, 'XX', lease_end, member_of(meta, id))
end

-- take() and lease_out() on a packed pending meta's fields, not a meta table (a table
-- per delivery, and its garbage, cost more than the delivery's commands): leases the
-- task `id` until lease_end (tag and session '' for a Lease), appends its reply row to
-- out (push_fields(), with its payload, last error and progress) and returns its new
-- packed meta.
local function lease_packed(out, id, raw, prefix, lease_end, tag, session, now, payload,
    last_error, said)
  local seq, due_at, enqueued_at, attempt, max_attempts, dedupe_ms, size, _, _, _, _, _,
    priority, group = meta_fields(raw)
  attempt = attempt + 1
  local receipt = receipt_of(prefix, id)
  push_fields(out, id, payload, 'in_flight', due_at, enqueued_at, attempt, max_attempts,
    receipt, lease_end, group, priority, last_error, said)
  return pack_fields(seq, due_at, enqueued_at, attempt, max_attempts, dedupe_ms, size,
    lease_end, IN_FLIGHT, receipt, tag, session, priority, group, now)
end
