-- Decide whether a call starts now under every one of its limits (rate_common.lua, prepended,
-- reads them), atomically: nothing is written until every limit has been asked, so a call refused
-- by one limit takes no unit of another. Time is the Redis server's (TIME). Every step is
-- O(log N) per unit (no loop over a window); a limit more is the same steps again.
-- A window rate (burst 0) is a sliding-window log: no closed window of one period holds more than
-- N units. A bucket rate is GCRA: at most B units at once, refilled one every period/N. A slot
-- reserved counts as a start where a new call is placed, so new calls never take the slots of
-- those told to come back; a call back for its slot is checked against the starts alone.
-- KEYS        see rate_common.lua. A log is a sorted set scored in server ms, of grants (ARGV[1]'s
--             form, a start at its score) and reservations (ARGV[2]'s form, the slot kept for a
--             caller at its score), a unit entry each (keys.unit_member); the reservations alone
--             beside it, scored alike, so a window's starts are two ZCOUNTs; the hop tokens by
--             reservation, '<cur>|<pending>' (the copy of the call known to be published and the
--             one being published: a hash, the home's only, none for RedisRateLimiter); a bucket
--             rate's two TATs; a pause's end (server ms)
-- ARGV[1]     the caller's grant member (one per attempt of a task id)
-- ARGV[2]     the caller's reservation member (one per task id)
-- ARGV[3]     "1": a caller that must wait reserves the next free slot; "0": it is only told when
-- ARGV[4]     the longest wait, in ms, a reservation is made for ("0": any)
-- ARGV[5]     the token of the copy asking ("" for a call never re-published)
-- ARGV[6]     the token of the copy it will publish if told to wait ("": no tokens kept)
-- ARGV[7...]  the limits (rate_common.lua)
-- Returns     {status, ms, now, ...}, now the server's time (ms) of the decision: {0, 0} granted
--             now; {1, ms} reserved ms from now; {2, ms} not reserved, the next free slot is ms
--             from now; {3, ms} its reservation kept, ms from now (a call back early, or whose
--             window is still full, or paused); {4, 0} this attempt started already; {5, 0} its
--             reservation is held by another copy of the call; {6, ms, now, i} its cost is more
--             than limit i's runtime rates admit at once: it holds no slot and asks again in ms
local granted, own, mine, next_token = ARGV[1], ARGV[2], ARGV[5], ARGV[6]
local limits = read_limits(7)
local home = limits[1]
-- A call over a runtime rate asks again at most this often (ms): an operator's reset is seen soon.
local RECHECK_MOST = 60000

-- A start at exactly now - period shares a closed window of one period with now: it stays.
for i, limit in ipairs(limits) do
  local before = '(' .. (now - limit.horizon)
  if i == 1 then  -- reservations whose calls never came back: their tokens go with them
    for _, gone in ipairs(redis.call('ZRANGEBYSCORE', limit.reserved, '-inf', before)) do
      if string.sub(gone, 1, 2) == 'r:' then
        redis.call('HDEL', limit.hops, gone)
      end
    end
  end
  redis.call('ZREMRANGEBYSCORE', limit.reserved, '-inf', before)
  redis.call('ZREMRANGEBYSCORE', limit.log, '-inf', before)
end

local function newest(limit)
  local last = redis.call('ZRANGE', limit.log, -1, -1, 'WITHSCORES')
  return last[2] and tonumber(last[2])
end

local function expire()
  for i, limit in ipairs(limits) do
    local last = newest(limit)
    if last then
      local ttl = math.max(1, last - now + limit.horizon + 1)
      redis.call('PEXPIRE', limit.log, ttl)
      redis.call('PEXPIRE', limit.reserved, ttl)
      if i == 1 then
        redis.call('PEXPIRE', limit.hops, ttl)
      end
    end
    -- A bucket is full again at its TATs: its state may go then.
    local full = now
    for j, rate in ipairs(limit.rates) do
      if rate.burst > 0 then
        full = math.max(full, tat(limit, 's', j), tat(limit, 'a', j))
      end
    end
    if full > now then
      redis.call('PEXPIRE', limit.bucket, math.ceil(full - now) + 1)
    end
  end
end

-- Moves bucket rates' TATs past a call of its cost at `at`: the schedule's (new calls), the
-- starts' (a start now).
local function advance(field, at)
  for _, limit in ipairs(limits) do
    for j, rate in ipairs(limit.rates) do
      if rate.burst > 0 then
        local moved = math.max(tat(limit, field, j), at) + limit.cost * interval(rate)
        redis.call('HSET', limit.bucket, field .. j, moved)
      end
    end
  end
end

local function grant(back)
  for i, limit in ipairs(limits) do
    remove_units(limit, own, units(limit, i))
    add_units(limit.log, now, granted, units(limit, i))
  end
  redis.call('HDEL', home.hops, own)
  if not back then
    advance('s', now)
  end
  advance('a', now)
  expire()
  return {0, 0, now}
end

-- The copy asking is the live one from now on; the copy it will publish is pending.
local function hand_on()
  if next_token ~= '' then
    redis.call('HSET', home.hops, own, mine .. '|' .. next_token)
  end
end

-- The latest end of a pause of any limit (now when none).
local function paused_until()
  local until_ms = now
  for _, limit in ipairs(limits) do
    until_ms = math.max(until_ms, tonumber(redis.call('GET', limit.pause) or 0))
  end
  return until_ms
end

if redis.call('ZSCORE', home.log, granted) then
  return {4, 0, now}
end

-- The tokens outlive a reservation an operator's change gave up (rate_change.lua): the live copy
-- is then decided as a new call, a stale one is still told apart.
if next_token ~= '' then
  local tokens = redis.call('HGET', home.hops, own)
  if tokens then
    local cur, pending = string.match(tokens, '^([^|]*)|(.*)$')
    if mine ~= cur and (pending == '' or mine ~= pending) then
      return {5, 0, now}
    end
  end
end

-- A cost more than a runtime rate admits at once (the declared rates admit it: the caller checked
-- them): it cannot start while that rate is in force, and is not failed for an operator's change.
-- It holds no slot (its units would keep others out) and asks again a period later, at most
-- RECHECK_MOST.
for i, limit in ipairs(limits) do
  for _, rate in ipairs(limit.rates) do
    if limit.cost > (rate.burst > 0 and rate.burst or rate.limit) then
      for j, each in ipairs(limits) do
        remove_units(each, own, units(each, j))
      end
      local wait = math.min(rate.period, RECHECK_MOST)
      hand_on()
      if redis.call('PTTL', home.hops) < wait + home.horizon then
        redis.call('PEXPIRE', home.hops, wait + home.horizon)
      end
      return {6, wait, now, i}
    end
  end
end

local at = redis.call('ZSCORE', home.reserved, own)
if at then
  local room = math.max(tonumber(at), paused_until())
  if room > now then
    hand_on()
    return {3, room - now, now}
  end
  -- Its slot has come; it may come late, and its start is now: it starts if every window that
  -- ends now has room for its units among the starts (slots reserved by calls not back yet are
  -- not starts: a call that comes late wastes no slot of those behind it), and every bucket
  -- rate's starts admit it.
  for _, limit in ipairs(limits) do
    for j, rate in ipairs(limit.rates) do
      if rate.burst > 0 then
        room = math.max(room, math.ceil(conforms_at(tat(limit, 'a', j), rate, limit.cost)))
      else
        local from = now - rate.period
        local starts = redis.call('ZCOUNT', limit.log, from, now) - redis.call('ZCOUNT', limit.reserved, from, now)
        if starts + limit.cost > rate.limit then
          -- It keeps its place until the start in the way has left. The entry of that rank (from
          -- the window's start) is that start or an earlier reservation: it comes back on time or
          -- early, never late.
          local rank = redis.call('ZCOUNT', limit.log, '-inf', '(' .. from) + starts + limit.cost - rate.limit - 1
          local first = redis.call('ZRANGE', limit.log, rank, rank, 'WITHSCORES')
          room = math.max(room, now + 1, tonumber(first[2]) + rate.period + 1)
        end
      end
    end
  end
  if room <= now then
    return grant(true)
  end
  hand_on()
  return {3, room - now, now}
end

-- A new call: a window with room for its units (entries and reservations alike) admits it now;
-- else its slot is one period after the entry whose leaving makes that room, and after the newest
-- by its units' share of a period: each new call is placed after every reserved one (none is
-- overtaken), and a backlog is spread evenly over the period rather than started in bursts of N.
local slot = paused_until()
for _, limit in ipairs(limits) do
  local last = newest(limit)
  for j, rate in ipairs(limit.rates) do
    if rate.burst > 0 then
      local conforms = math.max(conforms_at(tat(limit, 's', j), rate, limit.cost),
        conforms_at(tat(limit, 'a', j), rate, limit.cost))
      slot = math.max(slot, math.ceil(conforms))
    elseif redis.call('ZCOUNT', limit.log, now - rate.period, '+inf') + limit.cost > rate.limit then
      local rank = limit.cost - rate.limit - 1
      local nth = redis.call('ZRANGE', limit.log, rank, rank, 'WITHSCORES')
      slot = math.max(slot, now + 1, tonumber(nth[2]) + rate.period + 1,
        last + math.floor(rate.period * limit.cost / rate.limit))
    end
  end
end
if slot <= now then
  return grant(false)
end
local wait = slot - now
local most = tonumber(ARGV[4])
if ARGV[3] == '1' and (most == 0 or wait <= most) then
  for i, limit in ipairs(limits) do
    add_units(limit.log, slot, own, units(limit, i))
    add_units(limit.reserved, slot, own, units(limit, i))
  end
  advance('s', slot)
  hand_on()
  expire()
  return {1, wait, now}
end
return {2, wait, now}
