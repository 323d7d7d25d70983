-- list_tasks.lua: one page of a state's tasks (ListTasks), after a cursor: READY and
-- DELAYED in delivery order, IN_FLIGHT by lease end, DEAD, COMPLETED and CANCELLED by
-- when they ended. The cursor is the last entry a page looked at (its score and member
-- in the state's zset), so a task present for the whole listing appears exactly once
-- however many come and go: the next page starts right after that entry (found by
-- rank while it is still there, else by its score, skipping the members at that score
-- that sort before it).
-- Not read only: expired leases are returned first, as Lease would, so nothing that ran
-- out lists as IN_FLIGHT; it tells nobody something was stored (@no-replica-wait).
-- KEYS: the queue's keys (include/keys.lua)
-- ARGV[1] state ('ready' | 'delayed' | 'in_flight' | 'dead' | 'completed' |
-- 'cancelled'), ARGV[2] page size, ARGV[3] the most payload bytes to return (always at
-- least one task), ARGV[4] '1' when ARGV[5] names a group, ARGV[6] the cursor's score
-- ('' for the first page), ARGV[7] its member
-- Clock: Redis TIME.
-- A run that returned a full run's worth of expired leases answers AGAIN and does
-- nothing else (include/reclaim.lua); the store runs it again.
-- Returns {next score, next member (both '' on the last page), then 3 per task as
-- include/push_row.lua's push_row(), receipts blanked}.
--- @no-replica-wait
--- @include "keys"
--- @include "now_ms"
--- @include "meta"
--- @include "member"
--- @include "bulk"
--- @include "reclaim"
--- @include "within_budget"
--- @include "push_row"
--- @include "group_state"
--- @include "rotation"
--- @include "promote"
local wanted, page, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local group = ARGV[4] == '1' and ARGV[5] or nil
local after_score, after_member = ARGV[6], ARGV[7]
-- The most entries one page looks at when a group filters them: a page of a group
-- with few tasks ends early with a cursor, rather than scanning the whole state.
local SCAN_PER_PAGE = 10

local now = now_ms()
open_flow(now)
if reclaim(now) or (flow.on and promote(now)) then
  return again()
end

-- The state's zset and its score range.
local key, low, high = dead, '-inf', '+inf'
if wanted == 'ready' and flow.on then
  key = ranked
elseif wanted == 'ready' then
  key, high = pending, string.format('%d', now)
elseif wanted == 'delayed' then
  key, low = pending, string.format('(%d', now)
elseif wanted == 'in_flight' then
  key = inflight
elseif wanted == 'completed' then
  key = completed
elseif wanted == 'cancelled' then
  key = cancelled
end

-- Entries after the cursor, `count` at most, as {member, score} pairs in order.
local function after_cursor(count)
  local out = {}
  if after_score == '' then
    local flat = redis.call('ZRANGE', key, low, high, 'BYSCORE', 'LIMIT', 0, count,
      'WITHSCORES')
    for i = 1, #flat, 2 do
      out[#out + 1] = {flat[i], flat[i + 1]}
    end
    return out
  end
  -- The cursor's entry is still there: the page goes on from its rank.
  local rank = redis.call('ZRANK', key, after_member)
  if rank and redis.call('ZSCORE', key, after_member) == after_score then
    local flat = redis.call('ZRANGE', key, rank + 1, rank + count, 'WITHSCORES')
    for i = 1, #flat, 2 do
      out[#out + 1] = {flat[i], flat[i + 1]}
    end
  else
    -- Gone: from its score on, past the members at that score that sort before it.
    local offset = 0
    while #out < count do
      local flat = redis.call('ZRANGE', key, after_score, high, 'BYSCORE', 'LIMIT', offset,
        count, 'WITHSCORES')
      if #flat == 0 then
        break
      end
      for i = 1, #flat, 2 do
        local member, score = flat[i], flat[i + 1]
        if #out < count and (score ~= after_score or member > after_member) then
          out[#out + 1] = {member, score}
        end
      end
      offset = offset + #flat / 2
    end
  end
  -- Within the state's range (a READY page stops at what is due now).
  local kept = {}
  for _, entry in ipairs(out) do
    local score = tonumber(entry[2])
    local above = low == '-inf' or score > tonumber(string.sub(low, 2))
    local below = high == '+inf' or score <= tonumber(high)
    if above and below then
      kept[#kept + 1] = entry
    end
  end
  return kept
end

-- A group's READY tasks in flow mode: its own entries of `ready`, in its order (by
-- member, all score 0), so nothing of other groups is scanned.
local function group_ready(count)
  local from, to = group_range(group)
  if after_member ~= '' then
    from = '(' .. after_member
  end
  local out = {}
  for _, entry in ipairs(redis.call('ZRANGEBYLEX', ready, from, to, 'LIMIT', 0, count)) do
    out[#out + 1] = {entry, '0'}
  end
  return out
end

local by_group = group and wanted == 'ready' and flow.on
local scan = page
if group and not by_group then
  scan = page * SCAN_PER_PAGE
end
local entries
if by_group then
  entries = group_ready(scan + 1)
else
  entries = after_cursor(scan + 1)
end
local more = #entries > scan
if more then
  entries[#entries] = nil
end
if by_group then
  -- The entries are `ready`'s; the rows and the filter want the tasks' members.
  for _, entry in ipairs(entries) do
    entry[3] = member_of_entry(group, entry[1])
  end
  group = nil
end
-- The members to return (a group filters them by their metas), and how many entries
-- were looked at.
local members, looked = {}, 0
for _, entry in ipairs(entries) do
  if #members == page then
    break
  end
  looked = looked + 1
  local keep = true
  if group then
    local raw = redis.call('HGET', tasks, id_of(entry[1]))
    keep = raw ~= false and select(14, meta_fields(raw)) == group
  end
  if keep then
    members[#members + 1] = entry[3] or entry[1]
  end
end
local out = {'', ''}
local ids, raws, bodies, failures, progresses = within_budget(members, budget)
if #ids < #members then
  -- The reply's byte budget ended the page early: the next one starts after its last
  -- task (after its entry, which for a group's READY tasks is `ready`'s).
  local at = 0
  for n, entry in ipairs(entries) do
    if (entry[3] or entry[1]) == members[#ids] then
      at = n
    end
  end
  out[1], out[2] = entries[at][2], entries[at][1]
elseif looked > 0 and (looked < #entries or more) then
  -- Entries are left: the next page starts after the last one looked at.
  out[1], out[2] = entries[looked][2], entries[looked][1]
end
for n, id in ipairs(ids) do
  local meta = raws[n] and decode(raws[n])
  if meta then
    meta.receipt = nil
    push_row(out, id, meta, bodies[n], now, failures[n], progresses[n])
  end
end
return out
