-- Decide whether a call of a rate-limited partition starts now: a sliding-window log.
-- Time is the Redis server's (TIME): the clocks of the hosts never matter. No closed window of
-- one period holds more than ARGV[1] starts; a slot reserved counts as one where a new call is
-- placed, so new calls never take the slots of those told to come back.
-- KEYS[1]  the partition's log: a sorted set scored in server ms; 'g:<id>:<time>' a start
--          granted at its score, 'r:<id>' the start reserved for caller <id> at its score
-- ARGV[1]  N: the starts allowed per period
-- ARGV[2]  the period in milliseconds
-- ARGV[3]  the caller's id (a task id)
-- ARGV[4]  "1": a caller that must wait reserves the next free slot (the newest: no later
--          call takes it); "0": it is only told when that slot is
-- ARGV[5]  the longest wait, in ms, a reservation is made for ("0": any)
-- Returns  {0, 0} granted now; {1, ms} reserved (or already reserved) ms from now; {2, ms}
--          not reserved, the next free slot is ms from now
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local caller = ARGV[3]
local own = 'r:' .. caller
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- A start at exactly now - period shares a closed window of one period with now: it stays.
redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (now - period))

local function expire()
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, math.max(1, tonumber(last[2]) - now + period + 1))
  end
end

local function grant()
  redis.call('ZREM', key, own)
  redis.call('ZADD', key, now, 'g:' .. caller .. ':' .. time[1] .. '.' .. string.format('%06d', tonumber(time[2])))
  expire()
  return {0, 0}
end

local reserved = redis.call('ZSCORE', key, own)
if reserved then
  reserved = tonumber(reserved)
  if reserved > now then
    return {1, reserved - now}
  end
  -- Its slot has come; it may come late, and its start is now: it starts if the window that
  -- ends now holds fewer than N starts. Slots reserved by calls not back yet are not starts:
  -- a call that comes late wastes no slot of those behind it.
  local recent = redis.call('ZRANGEBYSCORE', key, now - period, now, 'WITHSCORES')
  local starts = {}
  for i = 1, #recent, 2 do
    if string.sub(recent[i], 1, 2) == 'g:' then
      starts[#starts + 1] = tonumber(recent[i + 1])
    end
  end
  if #starts < limit then
    return grant()
  end
  -- Else it keeps its place and comes back when the oldest start in the way has left.
  return {1, math.max(1, starts[#starts - limit + 1] + period + 1 - now)}
end

-- A new call: with fewer than N entries in all, one more fits in any window.
if redis.call('ZCARD', key) < limit then
  return grant()
end
-- Else its slot is one period after the N-th newest entry, and after the newest by 1/N of a
-- period: each new call is placed after every reserved one (none is overtaken), and a backlog
-- is spread evenly over the period rather than started in bursts of N.
local nth = redis.call('ZRANGE', key, -limit, -limit, 'WITHSCORES')
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local at = math.max(now + 1, tonumber(nth[2]) + period + 1, tonumber(last[2]) + math.floor(period / limit))
local wait = at - now
local most = tonumber(ARGV[5])
if ARGV[4] == '1' and (most == 0 or wait <= most) then
  redis.call('ZADD', key, at, own)
  expire()
  return {1, wait}
end
return {2, wait}
