-- One report of a call of an adaptive in-flight limit's partition, and the N it moves (AIMD, as
-- TCP's window): an overload (a 429, a named exception, a slow call) cuts N by a factor, once per
-- reaction (a call that started before the last cut was admitted under the old N and says
-- nothing of the new one), never below the floor; each success adds a share of 1/N, so N grows
-- by one every few windows of N calls served (gently: a partner's cap is met by an overload each
-- time N passes it), never above the ceiling. The state is the rate's hash
-- (rate_adapt.lua), its '~f' fields: read by in_flight_take.lua.
-- KEYS[1]  the partition's adaptive state hash
-- ARGV[1]  'ok', 'over' or 'slow'
-- ARGV[2]  ms since the call started (the worker's clock)
-- ARGV[3]  the reason a cut gives
-- ARGV[4..6] floor, ceiling, start of N
-- ARGV[7]  the cut factor
-- ARGV[8]  the slots a window of N successes adds
-- Returns  {1 if N changed, old N, new N, the reason}
local state = KEYS[1]
local kind, elapsed, reason = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local floor, ceiling, start, cut = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local growth = tonumber(ARGV[8])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local fields = redis.call('HMGET', state, '~flight', '~fwindow', '~fcut')
local old = tonumber(fields[1]) or start
local bounded = math.floor(math.min(ceiling, math.max(floor, old)))
-- The window is N with its fraction: successes grow it a share of a slot at a time.
local window = math.min(ceiling, math.max(floor, tonumber(fields[2]) or bounded))
local cut_at = tonumber(fields[3]) or 0
local why = ''
if kind == 'ok' then
  window = math.min(ceiling, window + growth / math.max(1, bounded))
elseif now - elapsed < cut_at then
  return {0, old, old, ''}
else
  window = math.max(floor, math.floor(bounded * cut))
  if window == bounded and bounded > floor then
    window = bounded - 1  -- a small N is cut too: one slot at least
  end
  cut_at = now
  why = reason
end
local n = math.floor(window)
redis.call('HSET', state, '~fwindow', tostring(window), '~fcut', cut_at, '~ffloor', floor, '~fceiling', ceiling)
if n == old and fields[1] then
  return {0, old, n, ''}
end
if why == '' then
  if not fields[1] and n == old then
    why = 'start'
  elseif bounded ~= old then
    why = 'bounds changed'
  else
    why = 'successes'
  end
end
redis.call('HSET', state, '~flight', n, '~freason', why, '~fat', now)
if n ~= old then
  redis.call('HINCRBY', state, '~fchanges', 1)
end
return {n ~= old and 1 or 0, old, n, why}
