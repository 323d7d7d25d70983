-- line.lua: the line of waiters, first come first served over every server. A line
-- entry is `<ticket>:<permits>` in the `line` zset (score: arrival, from the hash's
-- `seq`), and the same member in `leases` (score: when the entry ends unless its
-- waiter refreshes it). The waiters that may go now are the longest front of the line
-- whose permits fit beside the ones in use: a big request at the head holds back the
-- smaller ones behind it, so it is never starved.
-- How far into the line a run looks (the front that may go is woken again as it moves).
local WALK = 64

-- The ticket and permits of a line entry.
local function entry_of(member)
  local ticket, permits = string.match(member, '^(.*):(%d+)$')
  return ticket, tonumber(permits)
end

-- The tickets at the front of the line that fit now, and whether `member` is among
-- them (nil: not looked for).
local function fitting_front(line, in_use, limit, member)
  local tickets, sum, found = {}, in_use, false
  for _, entry in ipairs(redis.call('ZRANGE', line, 0, WALK - 1)) do
    local ticket, permits = entry_of(entry)
    sum = sum + permits
    if sum > limit then
      break
    end
    tickets[#tickets + 1] = ticket
    if entry == member then
      found = true
    end
  end
  return tickets, found
end

-- Publishes the tickets of the front that fits now (if any), so that their waiters,
-- on whichever server, try at once.
local function wake_front(line, in_use, limit, channel)
  local tickets = fitting_front(line, in_use, limit)
  if #tickets > 0 then
    redis.call('PUBLISH', channel, table.concat(tickets, ' '))
  end
end
