-- bulk.lua: variadic commands in chunks that stay under Lua's stack limit for
-- unpack() (an even size, so field-value and score-member pairs stay whole).
-- Runs `command` on key with args.
local function bulk(command, key, args)
  local n = #args
  for from = 1, n, 4000 do
    redis.call(command, key, unpack(args, from, math.min(from + 3999, n)))
  end
end

-- The values of fields ids in hash key (false where there is none), by HMGET.
local function hmget(key, ids)
  local values = {}
  for from = 1, #ids, 4000 do
    local got = redis.call('HMGET', key, unpack(ids, from, math.min(from + 3999, #ids)))
    for i, value in ipairs(got) do
      values[from + i - 1] = value
    end
  end
  return values
end

-- The scores of members in zset key (false where it has none), by ZMSCORE.
local function zmscore(key, members)
  local scores = {}
  for from = 1, #members, 4000 do
    local got = redis.call('ZMSCORE', key, unpack(members, from, math.min(from + 3999, #members)))
    for i = 1, #got do
      scores[from + i - 1] = got[i]
    end
  end
  return scores
end
