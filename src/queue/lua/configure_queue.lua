-- configure_queue.lua: change a queue's flow-control config (include/group_state.lua), field
-- by field; the fields not given stay. Puts the queue in flow mode.
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] the queue-changed channel, ARGV[2] its message, then field-value pairs:
-- paused ('0'/'1'), max_in_flight, group_max_in_flight (0: none), rate and group_rate
-- ("limit period_ms burst", '': none), keep_completed and keep_dead ("age_ms count",
-- '': none; include/keep.lua). Values are checked by the server. A change of those
-- alone does not put the queue in flow mode (keeping ended tasks needs none of it).
-- Clock: Redis TIME.
-- Returns the config as stats.lua does: paused (0/1), max_in_flight,
-- group_max_in_flight, rate, group_rate, keep_completed, keep_dead ('' for none).
--- @include "keys"
--- @include "now_ms"
--- @include "group_state"
--- @include "rotation"
local changed_channel, changed_message = ARGV[1], ARGV[2]

local now = now_ms()
open_flow(now)
local group_limits_changed = false
for i = 3, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if field ~= 'keep_completed' and field ~= 'keep_dead' then
    enter_flow()
  end
  if value == '' or value == '0' then
    redis.call('HDEL', config, field)
    flow.cfg[field] = nil
  else
    redis.call('HSET', config, field, value)
    flow.cfg[field] = value
  end
  if field == 'group_max_in_flight' or field == 'group_rate' then
    group_limits_changed = true
  end
end
if group_limits_changed then
  -- Groups waiting for a delivery to end under the old cap may go now (a rate limit's
  -- new value applies to a waiting group at its wake-up). Bounded like every run.
  wake(CAPPED, CAPPED)
end
redis.call('PUBLISH', changed_channel, changed_message)
local cfg = flow.cfg
return {cfg.paused == '1' and 1 or 0, number_of(cfg.max_in_flight),
  number_of(cfg.group_max_in_flight), cfg.rate or '', cfg.group_rate or '',
  cfg.keep_completed or '', cfg.keep_dead or ''}
