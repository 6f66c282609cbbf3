-- What a rate-limited partition looks like now, by the Redis server's clock: for the CLI and
-- RedisRateLimiter.state(). Changes nothing.
-- KEYS[1]  the partition's log (see rate_limit.lua)
-- ARGV[1]  N: the starts allowed per period
-- ARGV[2]  the period in milliseconds
-- Returns  false when KEYS[1] is not a log (another type); else {starts in the window that
--          ends now, slots reserved for calls not back yet, ms until a new call could start}
local key = KEYS[1]
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then
  return false
end
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local started, reserved = 0, 0
local entries = redis.call('ZRANGEBYSCORE', key, now - period, '+inf', 'WITHSCORES')
for i = 1, #entries, 2 do
  if string.sub(entries[i], 1, 2) == 'r:' then
    reserved = reserved + 1
  elseif tonumber(entries[i + 1]) <= now then
    started = started + 1
  end
end
local live = #entries / 2
if live < limit then
  return {started, reserved, 0}
end
-- The entries older than the window are gone at the next decision: counted without them.
local nth = redis.call('ZRANGEBYSCORE', key, now - period, '+inf', 'WITHSCORES', 'LIMIT', live - limit, 1)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local at = math.max(now + 1, tonumber(nth[2]) + period + 1, tonumber(last[2]) + math.floor(period / limit))
return {started, reserved, at - now}
