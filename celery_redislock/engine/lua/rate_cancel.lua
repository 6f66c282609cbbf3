-- Give back the slot a call reserved in every one of its limits (it will not come back for it:
-- revoked, expired, or a RedisRateLimiter caller that gave up), unless another copy of the call
-- holds it. rate_common.lua, prepended, reads the limits.
-- KEYS        see rate_common.lua (limit 1, the call's home, holds its reservation and tokens)
-- ARGV[1]     the call's reservation member
-- ARGV[2]     the token of the copy giving it back ("": any copy)
-- ARGV[3...]  the limits (rate_common.lua); a limit given without rates gives back its unit 0
--             only and moves no bucket (what a caller that knows only the log can ask)
-- Returns     1 given back; 0 there was none, or another copy holds it
local own, mine = ARGV[1], ARGV[2]
local limits = read_limits(3)
local home = limits[1]
if mine ~= '' then
  local tokens = redis.call('HGET', home.hops, own)
  if tokens then
    local cur, pending = string.match(tokens, '^([^|]*)|(.*)$')
    if mine ~= cur and (pending == '' or mine ~= pending) then
      return 0
    end
  end
end
redis.call('HDEL', home.hops, own)
if not remove_units(home, own, units(home, 1)) then
  return 0
end
for i, limit in ipairs(limits) do
  if i > 1 then
    remove_units(limit, own, units(limit, i))
  end
  -- The schedule moves back by the call's units: a later call may be placed a slot earlier than
  -- a log would place it; the starts' TAT still holds the bucket's promise.
  for j, rate in ipairs(limit.rates) do
    local field = 's' .. j
    local scheduled = redis.call('HGET', limit.bucket, field)
    if rate.burst > 0 and scheduled then
      redis.call('HSET', limit.bucket, field, tonumber(scheduled) - limit.cost * interval(rate))
    end
  end
end
return 1
