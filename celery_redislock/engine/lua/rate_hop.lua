-- A postponed call's copy is published: it becomes the live one, if no other copy took over
-- meanwhile (see rate_limit.lua's KEYS[3]).
-- KEYS[1]  the hop tokens of a partition's reservations
-- ARGV[1]  the call's reservation member
-- ARGV[2]  the token of the copy just published
-- Returns  1 confirmed; 0 the reservation's pending copy is another one (or it is gone)
local tokens = redis.call('HGET', KEYS[1], ARGV[1])
if not tokens then
  return 0
end
local pending = string.match(tokens, '|(.*)$')
if pending ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|')
return 1
