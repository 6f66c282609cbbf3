-- debounce: record a new call as the latest of its key's burst; say how long to delay it.
-- KEYS[1]  the key's "debounce" key (same slot: "{lock key}:debounce"): the latest call's task id
-- KEYS[2]  the key's "burst" key (same slot: "{lock key}:burst"): the server time (ms) of the
--          burst's first call; deleted when the burst's run starts
-- ARGV[1]  the call's task id
-- ARGV[2]  the debounce delay in milliseconds
-- ARGV[3]  debounce_max in milliseconds ("0": none)
-- ARGV[4]  the TTL of both keys in milliseconds
-- Returns  the delay in milliseconds to publish the call with: the debounce delay, cut so the
--          run comes at most debounce_max after the burst's first call (server clock: TIME).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first = tonumber(redis.call('GET', KEYS[2]) or '')
if not first then
  first = now
  redis.call('SET', KEYS[2], tostring(now), 'PX', ARGV[4])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
local delay = tonumber(ARGV[2])
local most = tonumber(ARGV[3])
if most > 0 and first + most - now < delay then
  delay = math.max(0, first + most - now)
end
return delay
