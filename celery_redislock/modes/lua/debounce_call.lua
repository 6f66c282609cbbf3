-- debounce: record a new call as the latest of its key's burst; say how long to delay it.
-- KEYS[1]  the key's "debounce" key (same slot: "{lock key}:debounce"): the latest call's task id
-- KEYS[2]  the key's "burst" key (same slot: "{lock key}:burst"): the server time (ms) of the
--          burst's first call, kept only with a debounce_max; deleted when the burst's run starts
-- KEYS[3]  the key's "calls" key (same slot: "{lock key}:calls"): a set of the task ids sent and
--          not yet due (each leaves it when due; the last one out deletes KEYS[1] and KEYS[3])
-- ARGV[1]  the call's task id
-- ARGV[2]  the debounce delay in milliseconds
-- ARGV[3]  debounce_max in milliseconds ("0": none)
-- ARGV[4]  the TTL of KEYS[1] and KEYS[3] in milliseconds: how long this call may take to come
--          due; never shortens what an earlier call of the burst asked for
-- ARGV[5]  the TTL of KEYS[2] in milliseconds (how long the burst's run may take to start)
-- Returns  {delay, now}: the delay in milliseconds to publish the call with, the debounce delay
--          cut so the run comes at most debounce_max after the burst's first call, and the
--          server's time (ms, TIME) it counts from.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay = tonumber(ARGV[2])
local most = tonumber(ARGV[3])
if most > 0 then
  local first = tonumber(redis.call('GET', KEYS[2]) or '')
  if not first then
    first = now
    redis.call('SET', KEYS[2], tostring(now), 'PX', ARGV[5])
  end
  if first + most - now < delay then
    delay = math.max(0, first + most - now)
  end
end
local ttl = math.max(tonumber(ARGV[4]), redis.call('PTTL', KEYS[1]))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ttl)
return {delay, now}
