-- history.lua: the queue's last hour, minute by minute, for the dashboard's charts (the
-- `history` hash; a minute is floor(Unix ms / 60000) on Redis' clock):
--   "<minute>"    deliveries that started in that minute (Lease and Subscribe)
--   "<minute>:w"  tasks waiting (READY + DELAYED) at the minute's first enqueue or first
--                 deliveries
-- Kept on the queue's slot, so every replica draws the same chart. The first record of
-- a minute makes the key expire an hour after it (an idle queue's history goes by
-- itself) and, once the hash holds more than three hours' fields (a queue active about
-- once an hour never lets it expire), drops those over an hour old: a bounded walk.
--- @include "keys"
local HISTORY_MINUTES = 60

-- Records `delivered` deliveries (Lease, Subscribe) or an enqueue (0) at `now`. Its cost
-- on the hot paths: one HINCRBY for a delivery, one HEXISTS for an enqueue, nothing for
-- a dispatch that delivered nothing; the waiting count and the expiry once a minute.
local function record_history(now, delivered)
  local minute = math.floor(now / 60000)
  if delivered > 0 then
    -- The minute's first deliveries also record the waiting count, unless an enqueue
    -- of this minute did.
    if redis.call('HINCRBY', history, minute, delivered) > delivered then
      return
    end
  elseif redis.call('HEXISTS', history, minute .. ':w') == 1 then
    return
  end
  local waiting = redis.call('ZCARD', pending) + redis.call('ZCARD', ranked)
  if redis.call('HSETNX', history, minute .. ':w', waiting) == 0 then
    return
  end
  redis.call('PEXPIRE', history, (HISTORY_MINUTES + 1) * 60000)
  if redis.call('HLEN', history) > 6 * HISTORY_MINUTES then
    local stale = {}
    for _, field in ipairs(redis.call('HKEYS', history)) do
      if tonumber(string.match(field, '^%d+')) < minute - HISTORY_MINUTES then
        stale[#stale + 1] = field
      end
    end
    if #stale > 0 then
      redis.call('HDEL', history, unpack(stale))
    end
  end
end
