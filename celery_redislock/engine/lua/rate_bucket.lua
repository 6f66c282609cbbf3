-- What a bucket rate (GCRA, rate_limit.lua) of a partition looks like now, by the Redis server's
-- clock: for the CLI and RedisRateLimiter.state(). Changes nothing; O(1) but for one ZCOUNT.
-- KEYS[1]  the partition's bucket state (a hash of TATs, keys.limit_keys), KEYS[2] its pause's
--          end, KEYS[3] its reservations (see rate_limit.lua)
-- ARGV[1]  N: the units refilled per period; ARGV[2] the period in ms; ARGV[3] B: the bucket's
--          size; ARGV[4] the rate's place among the limit's rates (its TATs' field number)
-- Returns  false when KEYS[1] is not a hash (another type); else {units the bucket holds now for
--          a new call, ms until it is full again (its TAT), ms until a new call of one unit
--          could start, ms until its pause ends (0: none), slots reserved for calls not back yet}
local bucket, pause, reserved = KEYS[1], KEYS[2], KEYS[3]
local kind = redis.call('TYPE', bucket).ok
if kind ~= 'hash' and kind ~= 'none' then
  return false
end
local limit, period, burst, j = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval = period / limit
-- A new call is placed by the later of the schedule's TAT and the starts' (rate_limit.lua).
local tat = math.max(now, tonumber(redis.call('HGET', bucket, 's' .. j) or 0),
  tonumber(redis.call('HGET', bucket, 'a' .. j) or 0))
local tokens = math.max(0, math.min(burst, math.floor(burst - (tat - now) / interval)))
local paused = math.max(0, tonumber(redis.call('GET', pause) or 0) - now)
local free = math.max(0, math.ceil(tat - (burst - 1) * interval) - now, paused)
local waiting = redis.call('ZCOUNT', reserved, now - period, '+inf')
return {tokens, math.ceil(tat - now), free, paused, waiting}
