-- group_turn.lua: what the parts of a group's turn cost inside Redis, each run N times
-- (ARGV[1]). KEYS[1] a hash and KEYS[2] a zset filled by group_turn_fill.lua.
-- Run: redis-cli --eval perf/lua/group_turn.lua grp rdy , 100000
local N = tonumber(ARGV[1])
local function t() local x = redis.call('TIME'); return tonumber(x[1]) * 1e6 + tonumber(x[2]) end
local out = {}
local t0 = t()
for i = 1, N do local g = 'g' .. (i % 100000) end
local base = t() - t0
t0 = t()
for i = 1, N do local g = 'g' .. (i % 100000); local a, b, c, d, e, f = g .. '\0w', g .. '\0c', g .. '\0f', g .. '\0h', g .. '\0t', g .. '\0n' end
out[#out+1] = 'six field names: ' .. string.format('%.3f', (t() - t0 - base) / N) .. ' us'
t0 = t()
for i = 1, N do local g = 'g' .. (i % 100000); redis.call('HMGET', KEYS[1], g .. '\0w', g .. '\0c', g .. '\0f', g .. '\0h', g .. '\0t', g .. '\0n') end
out[#out+1] = 'HMGET six fields (names incl.): ' .. string.format('%.3f', (t() - t0 - base) / N) .. ' us'
t0 = t()
for i = 1, N do local g = 'g' .. (i % 100000); redis.call('HMGET', KEYS[1], g .. '\0f', g .. '\0n') end
out[#out+1] = 'HMGET two fields (names incl.): ' .. string.format('%.3f', (t() - t0 - base) / N) .. ' us'
t0 = t()
for i = 1, N do local g = 'g' .. (i % 100000); redis.call('ZRANGEBYLEX', KEYS[2], '[' .. g .. '\0', '(' .. g .. '\1', 'LIMIT', 0, 2) end
out[#out+1] = 'ZRANGEBYLEX of a group (range incl.): ' .. string.format('%.3f', (t() - t0 - base) / N) .. ' us'
t0 = t()
for i = 1, N do local p = {weight = 1, credit = 0, in_flight = 0, head = nil, tat = nil, waiting = 2, want = 1, entries = {}, waits = false, first = 0} end
out[#out+1] = 'a plan table: ' .. string.format('%.3f', (t() - t0) / N) .. ' us'
t0 = t()
for i = 1, N do local f = function() return i end end
out[#out+1] = 'a closure: ' .. string.format('%.3f', (t() - t0) / N) .. ' us'
t0 = t()
for i = 1, N do redis.call('TIME') end
out[#out+1] = 'redis.call(TIME): ' .. string.format('%.3f', (t() - t0) / N) .. ' us'
return out
