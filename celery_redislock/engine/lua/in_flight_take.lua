-- Take a slot of an adaptive in-flight limit's partition: at most N calls of it run at once,
-- N read here from the partition's one state (no round trip of its own), so every worker admits
-- by the same N. Slots are a semaphore's (sem_acquire.lua's holders: renewed by sem_renew.lua,
-- given back by sem_release.lua, a dead holder's dropped at its expiry). No queue: a call over N
-- is put off by its worker and asks again.
-- KEYS[1]  the holders: a sorted set, member = holder id, score = its expiry (server ms)
-- KEYS[2]  the partition's adaptive state hash (adaptive_rates.adaptive_key): '~flight' is N
-- ARGV[1]  the caller's holder id
-- ARGV[2]  the holder's TTL in milliseconds
-- ARGV[3..5] the declared floor, ceiling and start of N (N is kept within the bounds declared now)
-- Returns  {1, N, running} taken (or held already: its TTL is reset), {0, N, running} not
local holders, state = KEYS[1], KEYS[2]
local me, ttl = ARGV[1], tonumber(ARGV[2])
local floor, ceiling, start = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local n = tonumber(redis.call('HGET', state, '~flight')) or start
n = math.floor(math.min(ceiling, math.max(floor, n)))
redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
local running = redis.call('ZCARD', holders)
if not redis.call('ZSCORE', holders, me) then
  if running >= n then
    return {0, n, running}
  end
  running = running + 1
end
redis.call('ZADD', holders, now + ttl, me)
if redis.call('PTTL', holders) < ttl then
  redis.call('PEXPIRE', holders, ttl)
end
return {1, n, running}
