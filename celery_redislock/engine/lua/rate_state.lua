-- What a rate-limited partition looks like now, by the Redis server's clock: for the CLI and
-- RedisRateLimiter.state(). Changes nothing; O(log N) (entries older than the window may still
-- be there: the next decision removes them, so they are counted out here).
-- KEYS[1]  the partition's log, KEYS[2] its reservations, KEYS[3] (if given) its pause's end
--          (see rate_limit.lua)
-- ARGV[1]  N: the starts allowed per period
-- ARGV[2]  the period in milliseconds
-- Returns  false when KEYS[1] is not a log (another type); else {starts in the window that
--          ends now, slots reserved for calls not back yet, ms until a new call could start,
--          ms until its pause ends (0: none)}
local log, reserved = KEYS[1], KEYS[2]
local kind = redis.call('TYPE', log).ok
if kind ~= 'zset' and kind ~= 'none' then
  return false
end
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = now - period
local paused = 0
if KEYS[3] then
  paused = math.max(0, tonumber(redis.call('GET', KEYS[3]) or 0) - now)
end
local started = redis.call('ZCOUNT', log, window, now) - redis.call('ZCOUNT', reserved, window, now)
local waiting = redis.call('ZCOUNT', reserved, window, '+inf')
local live = redis.call('ZCOUNT', log, window, '+inf')
if live < limit then
  return {started, waiting, paused, paused}
end
local rank = redis.call('ZCOUNT', log, '-inf', '(' .. window) + live - limit
local nth = redis.call('ZRANGE', log, rank, rank, 'WITHSCORES')
local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
local at = math.max(now + 1, tonumber(nth[2]) + period + 1, tonumber(last[2]) + math.floor(period / limit))
return {started, waiting, math.max(at - now, paused), paused}
