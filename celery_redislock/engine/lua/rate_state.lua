-- What a rate-limited partition looks like now, by the Redis server's clock: for the CLI and
-- RedisRateLimiter.state(). Changes nothing.
-- KEYS[1]  the partition's log (see rate_limit.lua)
-- ARGV[1]  N: the starts allowed per period
-- ARGV[2]  the period in milliseconds
-- Returns  false when KEYS[1] is not a log (another type); else {starts in the window that
--          ends now (reserved ones due included), reservations still ahead, ms until a new
--          call could start}
local key = KEYS[1]
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then
  return false
end
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local started = redis.call('ZCOUNT', key, now - period, now)
local ahead = redis.call('ZCOUNT', key, '(' .. now, '+inf')
local live = started + ahead
if live < limit then
  return {started, ahead, 0}
end
-- The entries older than the window are gone at the next decision: counted without them.
local nth = redis.call('ZRANGEBYSCORE', key, now - period, '+inf', 'WITHSCORES', 'LIMIT', live - limit, 1)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local at = math.max(now + 1, tonumber(nth[2]) + period + 1, tonumber(last[2]))
return {started, ahead, at - now}
