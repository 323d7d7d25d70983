-- delivery.lua: whether a receipt still names a live delivery (in flight, not
-- expired, not redelivered); a stale receipt changes nothing.
--- @include "meta"
--- @include "load"
--- @include "receipt"
-- Whether a meta's fields are a live delivery for this receipt.
local function live_fields(state, receipt, lease_end, given, now)
  return in_flight(state) and receipt == given and lease_end > now
end

-- The id and meta of the live delivery this receipt names, or nil (stale: expired,
-- redelivered or gone).
local function delivery(given, now)
  local id = receipt_id(given)
  if not id then
    return nil
  end
  local meta = load(id)
  if not (meta and live_fields(meta.state, meta.receipt, meta.lease_end, given, now)) then
    return nil
  end
  return id, meta
end
