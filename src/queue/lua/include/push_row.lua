-- push_row.lua: one task as a reply row (decoded in src/queue/replies.rs).
--- @include "meta"
-- Appends to out: id, payload, state name, due, enqueued_at, attempt, max_attempts,
-- receipt, lease end, group, priority, last error, progress.
local function push_fields(out, id, payload, state_name, due, enqueued_at, attempt,
    max_attempts, receipt, lease_end, group, priority, last_error, said)
  local n = #out
  out[n + 1] = id
  out[n + 2] = payload or ''
  out[n + 3] = state_name
  out[n + 4] = due
  out[n + 5] = enqueued_at
  out[n + 6] = attempt
  out[n + 7] = max_attempts
  out[n + 8] = receipt
  out[n + 9] = lease_end
  out[n + 10] = group
  out[n + 11] = priority
  out[n + 12] = last_error or ''
  out[n + 13] = said or ''
end

-- push_fields() for a meta, its state named from its state and due.
local function push_row(out, id, meta, payload, now, last_error, said)
  local state_name = 'ready'
  if in_flight(meta.state) then
    state_name = 'in_flight'
  elseif meta.state == DEAD then
    state_name = 'dead'
  elseif meta.state == COMPLETED then
    state_name = 'completed'
  elseif meta.state == CANCELLED then
    state_name = 'cancelled'
  elseif meta.due > now then
    state_name = 'delayed'
  end
  push_fields(out, id, payload, state_name, meta.due, meta.enqueued_at, meta.attempt,
    meta.max_attempts, meta.receipt or '', meta.lease_end or 0, meta.group, meta.priority,
    last_error, said)
end
