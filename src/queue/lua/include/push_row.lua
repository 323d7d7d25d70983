-- push_row.lua: one task as a reply row of three values (decoded in src/queue/replies.rs).
--- @include "meta"
-- A row's head: its due, enqueued_at, attempt, max_attempts, lease end and priority
-- (doubles), then the lengths of its id, state name, receipt, group and last error;
-- those texts follow it in that order.
local ROW_HEAD = '<ddddddI4I4I4I4I4'

-- Appends a task's row to out: three values, its head and texts packed in one (a reply
-- value costs the server's RESP parser more than its bytes: thirteen values a task
-- were a quarter of a one-Ack task's server instructions), then its payload and its
-- progress as values of their own (never copied into the packed one).
local function push_fields(out, id, payload, state_name, due, enqueued_at, attempt,
    max_attempts, receipt, lease_end, group, priority, last_error, said)
  last_error = last_error or ''
  local n = #out
  out[n + 1] = struct.pack(ROW_HEAD, due, enqueued_at, attempt, max_attempts, lease_end,
    priority, #id, #state_name, #receipt, #group, #last_error) .. id .. state_name ..
    receipt .. group .. last_error
  out[n + 2] = payload or ''
  out[n + 3] = said or ''
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
