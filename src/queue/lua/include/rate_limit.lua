-- rate_limit.lua: GCRA rate limits (of a queue, of each group), stored as text.

-- A RateLimit as stored ("limit period_ms burst"), as GCRA's emission interval and
-- tolerance (ms), or nil for none.
local function limiter(text)
  if not text then
    return nil
  end
  local limit, period, burst = string.match(text, '^(%d+) (%d+) (%d+)$')
  limit, period, burst = tonumber(limit), tonumber(period), tonumber(burst)
  if not limit or limit == 0 then
    return nil
  end
  local interval = period / limit
  return {interval = interval, tolerance = (burst - 1) * interval}
end

-- How long (ms) until the limiter lets one more delivery start; 0: now. tat is its
-- theoretical arrival time (nil: never used).
local function limiter_wait(lim, tat, now)
  local at = math.max(tat or now, now)
  return math.max(at - now - lim.tolerance, 0)
end

-- The limiter's tat after one more start now.
local function limiter_take(lim, tat, now)
  return math.max(tat or now, now) + lim.interval
end

local function tat_text(tat)
  return string.format('%.4f', tat)
end
