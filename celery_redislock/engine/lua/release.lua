-- Release a lock only if it is still the caller's (compare-and-delete).
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's holder id, or a prefix of it (see ARGV[2])
-- ARGV[2]  "1" to match ARGV[1] as a prefix of the holder id (a dead process's locks), else exact
-- ARGV[3]  a channel to PUBLISH the key on once it is deleted, for waiters ("" for none)
-- Returns  1 deleted, else the current holder's id, or false when the key is gone.
local current = redis.call('GET', KEYS[1])
if not current then
  return false
end
local mine
if ARGV[2] == '1' then
  mine = string.sub(current, 1, string.len(ARGV[1])) == ARGV[1]
else
  mine = current == ARGV[1]
end
if not mine then
  return current
end
redis.call('DEL', KEYS[1])
if ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], KEYS[1])
end
return 1
