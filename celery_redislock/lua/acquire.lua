-- Take a lock, re-enter it, or take over a lock handed over to the caller.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's holder id
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  a hand-over id the caller may take the lock over from ("" for none)
-- Returns  1 taken, 2 re-entered (the caller already held it), 3 taken over from ARGV[3],
--          or, when someone else holds it, that holder's id (a string).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 2
end
if ARGV[3] ~= '' and current == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 3
end
return current
