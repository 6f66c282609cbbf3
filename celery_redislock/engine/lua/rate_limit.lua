-- Decide whether a call of a rate-limited partition starts now: a sliding-window log, every step
-- O(log N) (no loop over the window). Time is the Redis server's (TIME): the hosts' clocks never
-- matter. No closed window of one period holds more than ARGV[1] starts; a slot reserved counts
-- as one where a new call is placed, so new calls never take the slots of those told to come back.
-- KEYS[1]  the log: a sorted set scored in server ms, of grants (ARGV[3]'s form, a start at its
--          score) and reservations (ARGV[4]'s form, the slot kept for a caller at its score)
-- KEYS[2]  the reservations only, scored alike: a window's starts are two ZCOUNTs
-- KEYS[3]  hop tokens by reservation: '<cur>|<pending>', the token of the copy of the call known
--          to be published and of the copy being published (a hash; none for RedisRateLimiter)
-- ARGV[1]  N: the starts allowed per period
-- ARGV[2]  the period in milliseconds
-- ARGV[3]  the caller's grant member (one per attempt of a task id)
-- ARGV[4]  the caller's reservation member (one per task id)
-- ARGV[5]  "1": a caller that must wait reserves the next free slot; "0": it is only told when
-- ARGV[6]  the longest wait, in ms, a reservation is made for ("0": any)
-- ARGV[7]  the token of the copy asking ("" for a call never re-published)
-- ARGV[8]  the token of the copy it will publish if told to wait ("": no tokens kept)
-- Returns  {0, 0} granted now; {1, ms} reserved ms from now; {2, ms} not reserved, the next free
--          slot is ms from now; {3, ms} its reservation kept, ms from now (a call back early, or
--          whose window is still full); {4, 0} this attempt started already in the window;
--          {5, 0} its reservation is held by another copy of the call
local log, reserved, hops = KEYS[1], KEYS[2], KEYS[3]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local granted, own = ARGV[3], ARGV[4]
local mine, next_token = ARGV[7], ARGV[8]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- A start at exactly now - period shares a closed window of one period with now: it stays.
local before = '(' .. (now - period)
-- Reservations whose calls never came back: their tokens go with them (each once).
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', reserved, '-inf', before)) do
  redis.call('HDEL', hops, gone)
end
redis.call('ZREMRANGEBYSCORE', reserved, '-inf', before)
redis.call('ZREMRANGEBYSCORE', log, '-inf', before)

local function expire()
  local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  if last[2] then
    local ttl = math.max(1, tonumber(last[2]) - now + period + 1)
    redis.call('PEXPIRE', log, ttl)
    redis.call('PEXPIRE', reserved, ttl)
    redis.call('PEXPIRE', hops, ttl)
  end
end

local function grant()
  redis.call('ZREM', log, own)
  redis.call('ZREM', reserved, own)
  redis.call('HDEL', hops, own)
  redis.call('ZADD', log, now, granted)
  expire()
  return {0, 0}
end

-- The copy asking is the live one from now on; the copy it will publish is pending.
local function hand_on()
  if next_token ~= '' then
    redis.call('HSET', hops, own, mine .. '|' .. next_token)
  end
end

if redis.call('ZSCORE', log, granted) then
  return {4, 0}
end

local at = redis.call('ZSCORE', reserved, own)
if at then
  if next_token ~= '' then
    local tokens = redis.call('HGET', hops, own)
    if tokens then
      local cur, pending = string.match(tokens, '^([^|]*)|(.*)$')
      if mine ~= cur and (pending == '' or mine ~= pending) then
        return {5, 0}
      end
    end
  end
  at = tonumber(at)
  if at > now then
    hand_on()
    return {3, at - now}
  end
  -- Its slot has come; it may come late, and its start is now: it starts if the window that
  -- ends now holds fewer than N starts. Slots reserved by calls not back yet are not starts:
  -- a call that comes late wastes no slot of those behind it.
  local window = now - period
  local starts = redis.call('ZCOUNT', log, window, now) - redis.call('ZCOUNT', reserved, window, now)
  if starts < limit then
    return grant()
  end
  -- Else it keeps its place until the oldest start in the way has left. The entry of that rank
  -- (the log begins at the window's start) is that start or an earlier reservation: it comes
  -- back on time or early, never late.
  local first = redis.call('ZRANGE', log, starts - limit, starts - limit, 'WITHSCORES')
  hand_on()
  return {3, math.max(1, tonumber(first[2]) + period + 1 - now)}
end

-- A new call: with fewer than N entries in all, one more fits in any window.
if redis.call('ZCARD', log) < limit then
  return grant()
end
-- Else its slot is one period after the N-th newest entry, and after the newest by 1/N of a
-- period: each new call is placed after every reserved one (none is overtaken), and a backlog
-- is spread evenly over the period rather than started in bursts of N.
local nth = redis.call('ZRANGE', log, -limit, -limit, 'WITHSCORES')
local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
local slot = math.max(now + 1, tonumber(nth[2]) + period + 1, tonumber(last[2]) + math.floor(period / limit))
local wait = slot - now
local most = tonumber(ARGV[6])
if ARGV[5] == '1' and (most == 0 or wait <= most) then
  redis.call('ZADD', log, slot, own)
  redis.call('ZADD', reserved, slot, own)
  hand_on()
  expire()
  return {1, wait}
end
return {2, wait}
