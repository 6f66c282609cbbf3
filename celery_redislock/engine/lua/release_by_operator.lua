-- An operator's release of a lock (the CLI's `release`, the web page): compare-and-delete, and
-- the holder noted as released, so that its renewal, should it still run, does not take the
-- lock back (renew.lua) but reports the release.
-- KEYS[1]  the lock key
-- KEYS[2]  the holders released by an operator (a hash: holder id -> 1), keys.released_key
-- ARGV[1]  the holder id the operator saw
-- ARGV[2]  a channel to PUBLISH the key on once it is deleted, for waiters ("" for none)
-- ARGV[3]  how long to keep the note when the lock has no TTL, in milliseconds
-- Returns  1 deleted, else the current holder's id, or false when the key is gone.
local current = redis.call('GET', KEYS[1])
if not current then
  return false
end
if current ~= ARGV[1] then
  return current
end
-- A live holder renews before its TTL runs out: twice what is left covers a late renewal.
local left = redis.call('PTTL', KEYS[1])
local keep = left > 0 and 2 * left or tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], 1)
if redis.call('PTTL', KEYS[2]) < keep then
  redis.call('PEXPIRE', KEYS[2], keep)
end
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
