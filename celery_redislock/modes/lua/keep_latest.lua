-- keep_latest: record a call as the latest of its key, and take the lock if it is free.
-- KEYS[1]  the lock key
-- KEYS[2]  the key's "latest" key (same slot: "{lock key}:latest"): the task id of the
--          latest call; only that call may take the lock once it is free
-- ARGV[1]  the caller's holder id
-- ARGV[2]  the lock's TTL in milliseconds
-- ARGV[3]  the caller's task id
-- ARGV[4]  the TTL of the latest key in milliseconds (refreshed at every call and check)
-- ARGV[5]  "1": a pending call checking again (it was the latest once; it is replaced if
--          another is now); "0": a new call, which becomes the latest whatever was before
-- ARGV[6]  what every holder id of the caller's task id starts with: another delivery of the
--          very message holding the lock (a redelivered copy) is not a new call, and must not
--          replace the pending one
-- Returns  {1, ""} the lock is taken (or re-entered): run;
--          {0, latest} replaced: a later call is the latest now;
--          {2, holder} pending (or another delivery of this message holds it): the lock is
--          held by holder.
local latest = redis.call('GET', KEYS[2])
if ARGV[5] == '1' and latest and latest ~= ARGV[3] then
  return {0, latest}
end
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] and string.sub(current, 1, string.len(ARGV[6])) == ARGV[6] then
  return {2, current}
end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, ''}
end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, ''}
end
return {2, current}
