-- Give back the slot a call reserved (it will not come back for it: revoked, expired, or a
-- RedisRateLimiter caller that gave up), unless another copy of the call holds it.
-- KEYS[1..3]  the log, its reservations and their hop tokens (see rate_limit.lua)
-- ARGV[1]     the call's reservation member
-- ARGV[2]     the token of the copy giving it back ("": any copy)
-- Returns     1 given back; 0 there was none, or another copy holds it
local own, mine = ARGV[1], ARGV[2]
if mine ~= '' then
  local tokens = redis.call('HGET', KEYS[3], own)
  if tokens then
    local cur, pending = string.match(tokens, '^([^|]*)|(.*)$')
    if mine ~= cur and (pending == '' or mine ~= pending) then
      return 0
    end
  end
end
redis.call('HDEL', KEYS[3], own)
redis.call('ZREM', KEYS[2], own)
return redis.call('ZREM', KEYS[1], own)
