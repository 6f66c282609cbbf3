-- Pause rate limits until a time on the server's clock: every decision that names one of them
-- admits nothing until then (rate_limit.lua). A pause only ever lengthens.
-- KEYS     the pause keys of the limits (keys.limit_keys)
-- ARGV[1]  the pause, in ms from now
-- Returns  the end of the pause, server ms (the latest of this one and one already there)
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  until_ms = math.max(until_ms, tonumber(redis.call('GET', key) or 0))
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, until_ms, 'PX', until_ms - now)
end
return until_ms
