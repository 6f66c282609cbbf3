-- What a semaphore looks like now, by the Redis server's clock: for owned(), locked(), the CLI.
-- KEYS[1]  the holders (sorted set, see sem_acquire.lua)
-- KEYS[2]  the waiters' queue
-- Returns  false when KEYS[1] is not a semaphore (a plain lock, or another type); else
--          {waiters queued, {holder id, milliseconds left, ...}} for the live holders, in
--          the order their slots expire.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'zset' and kind ~= 'none' then
  return false
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local live = {}
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #entries, 2 do
  live[#live + 1] = entries[i]
  live[#live + 1] = tonumber(entries[i + 1]) - now
end
return {redis.call('ZCARD', KEYS[2]), live}
