-- Take a lock, re-enter it, or take over a lock handed over to the caller.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's holder id
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  a hand-over id the caller may take the lock over from ("" for none)
-- ARGV[4]  a suffix: a holder id ending with it may be taken over too ("" for none); a
--          lock taken at enqueue ends with "@queued" and yields to whichever execution
--          of that task comes first
-- Returns  1 taken, 2 re-entered (the caller already held it), 3 taken over (ARGV[3], ARGV[4]),
--          or, when someone else holds it, that holder's id (a string).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 2
end
local suffix = ARGV[4]
if (ARGV[3] ~= '' and current == ARGV[3])
    or (suffix ~= '' and string.sub(current, -string.len(suffix)) == suffix) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 3
end
return current
