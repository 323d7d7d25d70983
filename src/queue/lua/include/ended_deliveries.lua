-- ended_deliveries.lua: the groups' in-flight counts after deliveries ended.
--- @include "keys"
--- @include "bulk"
--- @include "group_state"
--- @include "rotation"

-- Flow mode: records ended deliveries of groups (group -> count, and the groups in
-- order): their in-flight counts drop, and with a group cap the groups are considered
-- again in that order (without one, a delivery's end changes no group's place). True
-- when a cap was set, so that the script tells the queue's dispatchers a slot is free.
-- The groups' counts are read in one HMGET and written in one command per kind, not a
-- few commands per group (an Ack of a batch spread over many groups is one run).
local function deliveries_ended(ended, order)
  local fields = {}
  for _, group in ipairs(order) do
    fields[#fields + 1] = gfield(group, G_IN_FLIGHT)
    fields[#fields + 1] = gfield(group, G_WAITING)
    fields[#fields + 1] = gfield(group, G_DEAD)
    fields[#fields + 1] = gfield(group, G_PAUSED)
    fields[#fields + 1] = gfield(group, G_WEIGHT)
  end
  local states = hmget(groups, fields)
  local sets, dels, idle = {}, {}, {}
  for k, group in ipairs(order) do
    local at = (k - 1) * 5
    local left = number_of(states[at + 1]) - ended[group]
    if left > 0 then
      sets[#sets + 1] = fields[at + 1]
      sets[#sets + 1] = int_text(left)
    else
      dels[#dels + 1] = fields[at + 1]
      if holds_nothing(states[at + 2], false, states[at + 3], states[at + 4], states[at + 5]) then
        idle[#idle + 1] = group
      end
    end
  end
  -- bulk() sends nothing for an empty list.
  bulk('HSET', groups, sets)
  bulk('HDEL', groups, dels)
  bulk('ZREM', group_index, idle)
  if number_of(flow.cfg.group_max_in_flight) > 0 then
    consider_all(order, false)
  end
  return number_of(flow.cfg.max_in_flight) > 0 or number_of(flow.cfg.group_max_in_flight) > 0
end
