-- End a throttled run: keep its key until the window that began when the run started is over.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's holder id (compare: a key that is no longer the caller's is left alone)
-- ARGV[2]  the id the key keeps for the rest of the window ("{task id}@throttled")
-- ARGV[3]  milliseconds left in the window (measured by the caller from the run's start)
-- ARGV[4]  a channel to PUBLISH the key on if it is deleted, for waiters ("" for none)
-- Returns  2 kept for the rest of the window, 1 deleted (the window is over), else the
--          current holder's id, or false when the key is gone.
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  return current
end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 2
end
redis.call('DEL', KEYS[1])
if ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], KEYS[1])
end
return 1
