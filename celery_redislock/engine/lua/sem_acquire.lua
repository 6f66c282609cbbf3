-- Take a slot of a fair counting semaphore, or keep the caller's place in its queue.
-- Time is the Redis server's (TIME): the clocks of the hosts never matter.
-- KEYS[1]  the holders: a sorted set, member = holder id, score = its expiry (server ms)
-- KEYS[2]  the waiters' queue: a sorted set, member = holder id, score = its ticket
-- KEYS[3]  the waiters' liveness: a sorted set, member = holder id, score = its expiry (server ms)
-- KEYS[4]  the ticket counter (INCR)
-- ARGV[1]  the caller's holder id
-- ARGV[2]  the limit: how many may hold a slot at once
-- ARGV[3]  the holder's TTL in milliseconds
-- ARGV[4]  the waiter's TTL in milliseconds: the caller queues (takes a ticket, or keeps its
--          own) and must call again within it; "0": do not queue, take a slot only if one is
--          free that no waiter is queued for
-- ARGV[5]  the caller's ticket from an earlier call ("0" for none): a waiter dropped as dead
--          while it was alive gets its place back
-- ARGV[6]  a channel to PUBLISH KEYS[1] on when stale holders or dead waiters were dropped
--          (others may fit now); "" for none
-- ARGV[7]  a holder id prefix naming the caller's siblings (another delivery of the same
--          task id, "<task id>@"); "" for none. A live sibling holding a slot refuses the caller
-- Returns  {1} taken, {2} re-entered (the caller already held a slot: its TTL is reset),
--          or {0, ticket, holders}: no slot for the caller now; ticket is its place in the
--          queue (0 when not queued), holders the ids holding the slots (a lock's holder
--          when KEYS[1] is a plain lock; only the sibling when a sibling refused it).
local holders, queue, alive, counter = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local me = ARGV[1]
local limit = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local wait_ttl = tonumber(ARGV[4])
if redis.call('TYPE', holders).ok == 'string' then
  return {0, 0, {redis.call('GET', holders)}}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local dropped = redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', queue, waiter)
end
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', alive, '-inf', now)
end
if (dropped > 0 or #dead > 0) and ARGV[6] ~= '' then
  redis.call('PUBLISH', ARGV[6], holders)
end

local function hold(status)
  redis.call('ZADD', holders, now + ttl, me)
  if redis.call('PTTL', holders) < ttl then
    redis.call('PEXPIRE', holders, ttl)
  end
  redis.call('ZREM', queue, me)
  redis.call('ZREM', alive, me)
  return {status}
end

if redis.call('ZSCORE', holders, me) then
  return hold(2)
end

local siblings = ARGV[7]
if siblings ~= '' then
  for _, holder in ipairs(redis.call('ZRANGE', holders, 0, -1)) do
    if string.sub(holder, 1, #siblings) == siblings then
      return {0, 0, {holder}}
    end
  end
end

local ticket = 0
local ahead
if wait_ttl > 0 then
  local mine = redis.call('ZSCORE', queue, me)
  if mine then
    ticket = tonumber(mine)
  else
    ticket = tonumber(ARGV[5])
    if ticket <= 0 then
      ticket = redis.call('INCR', counter)
    end
    redis.call('ZADD', queue, ticket, me)
  end
  redis.call('ZADD', alive, now + wait_ttl, me)
  for _, key in ipairs({queue, alive, counter}) do
    if redis.call('PTTL', key) < wait_ttl then
      redis.call('PEXPIRE', key, wait_ttl)
    end
  end
  ahead = redis.call('ZRANK', queue, me)
else
  ahead = redis.call('ZCARD', queue)
end

-- Served in ticket order: the caller fits when the free slots outnumber the waiters ahead of it.
if redis.call('ZCARD', holders) + ahead < limit then
  return hold(1)
end
return {0, ticket, redis.call('ZRANGE', holders, 0, -1)}
