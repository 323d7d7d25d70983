-- first_score.lua: the lowest score in a sorted set, or -1 when it is empty.
local function first_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2])
  end
  return -1
end
