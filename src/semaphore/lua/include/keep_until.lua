-- keep_until.lua: makes `key` live at least until `at_ms` (Unix ms), never shortening
-- it. PEXPIREAT's own GT flag treats a key without expiry as living forever and would
-- never set the first one, so the current expiry is read first.
local function keep_until(key, at_ms)
  local current = redis.call('PEXPIRETIME', key)
  if current ~= -2 and current < at_ms then
    redis.call('PEXPIREAT', key, at_ms)
  end
end
