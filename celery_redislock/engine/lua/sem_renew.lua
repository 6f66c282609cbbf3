-- Renew a batch of semaphore slots in one call; re-take those that are gone while a slot is free.
-- Time is the Redis server's (TIME).
-- KEYS[2i-1]    the holders of a semaphore (sorted set, see sem_acquire.lua)
-- KEYS[2i]      the holders an operator released from it (sem_release.lua, keys.released_key)
-- ARGV[4i-3]    the holder id the caller holds a slot of KEYS[i] under
-- ARGV[4i-2]    the TTL in milliseconds for that slot
-- ARGV[4i-1]    the semaphore's limit
-- ARGV[4i]      a channel to PUBLISH KEYS[i] on when stale holders were dropped ("" for none)
-- Returns       a list, one entry per key: 1 renewed, 2 re-taken (it was gone, a slot was
--               free), 3 released by an operator (not taken back), or the ids holding every
--               slot now, joined by ", " (a string).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local result = {}
for i = 1, #KEYS / 2 do
  local key, noted = KEYS[2 * i - 1], KEYS[2 * i]
  local holder = ARGV[4 * i - 3]
  local ttl = tonumber(ARGV[4 * i - 2])
  local limit = tonumber(ARGV[4 * i - 1])
  local channel = ARGV[4 * i]
  if redis.call('TYPE', key).ok == 'string' then
    result[i] = redis.call('GET', key)
  else
    local dropped = redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    if dropped > 0 and channel ~= '' then
      redis.call('PUBLISH', channel, key)
    end
    local status
    if redis.call('ZSCORE', key, holder) then
      status = 1
    elseif redis.call('HDEL', noted, holder) == 1 then
      status = 3 -- released by an operator: told, not taken back
    elseif redis.call('ZCARD', key) < limit then
      status = 2
    end
    if status == 3 then
      result[i] = status
    elseif status then
      redis.call('ZADD', key, now + ttl, holder)
      if redis.call('PTTL', key) < ttl then
        redis.call('PEXPIRE', key, ttl)
      end
      result[i] = status
    else
      result[i] = table.concat(redis.call('ZRANGE', key, 0, -1), ', ')
    end
  end
end
return result
