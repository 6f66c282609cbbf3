-- Hand a lock over: replace the holder id, only if the caller still holds it.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's holder id
-- ARGV[2]  the holder id to hand it to
-- ARGV[3]  the new TTL in milliseconds
-- Returns  1 handed over, else the current holder's id, or false when the key is gone.
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  return current
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
