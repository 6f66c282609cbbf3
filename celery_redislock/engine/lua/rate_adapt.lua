-- One report of a call of an adaptive limit's partition, and the decision it moves: the state is
-- one hash per partition, read and written here alone, so every worker sees one value.
-- The rule (docs/design.md, "Adaptive limits"), 'default': slow start, then a remembered peak.
-- Until the first overload each success adds one call a second (the rate doubles each second, as
-- TCP's slow start does); an overload cuts the rate by a factor and remembers the rate it came at
-- (the peak), by less when it comes at or below the peak (the partner's known capacity, met by
-- a bunch of calls, not passed); below the peak a success adds a share of a call (fast far from it, slowly near it);
-- once the peak has held for a probe time the partner may have room again, and the rate grows
-- fast past it. A cut is made once per reaction: a call that started before the last cut was
-- decided under the old rate and says nothing of the new one. A latency above the target cuts
-- gently. 'aimd' and 'gradient' are the rules it was measured against (benchmarks.adaptive_limit).
-- KEYS[1..5]  the partition's log, reservations, hop tokens, bucket state, pause end
--             (keys.limit_keys)
-- KEYS[6]     the state hash: field ARGV[1] is the published rate in wire form (what the decision
--             reads as the limit's runtime rate, rate_common.lua); '~'-fields are the state (no
--             limit name holds a '~')
-- ARGV[1]     the limit's name
-- ARGV[2]     'ok' (a success), 'over' (an overload), 'slow' (a success above the latency target)
-- ARGV[3]     ms since the call started (the worker's clock: no skew between hosts)
-- ARGV[4]     the reason a cut gives
-- ARGV[5..8]  floor, ceiling, start (calls a second), burst (units)
-- ARGV[9..14] growth a success (fast, slow), cut factor (over, slow), probe ms, publish step
-- ARGV[15]    the rule: 'default', 'aimd' (one call a second more each second, the same cuts) or
--             'gradient' (sqrt(rate) more each second, cut by the latency's gradient against its
--             long average, and by the overload cut)
-- ARGV[16]    the cut factor of an overload at or below the peak ('default')
-- Returns     {1 if the published rate changed, the old rate, the new rate, the reason} (rates as
--             text: Lua numbers would be cut to integers)
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local log, reserved, bucket, state = KEYS[1], KEYS[2], KEYS[4], KEYS[6]
local name, kind, elapsed, reason = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local floor, ceiling, start, burst = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local fast, slow, cut, gentle = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local probe, step, rule = tonumber(ARGV[13]), tonumber(ARGV[14]), ARGV[15] or 'default'
local near_cut = tonumber(ARGV[16]) or cut

local fields = redis.call('HMGET', state, '~rate', '~value', '~peak', '~cut', '~grown', '~latency')
local value = tonumber(fields[2]) or start
local rate = tonumber(fields[1]) or value
local peak, cut_at = tonumber(fields[3]) or 0, tonumber(fields[4]) or 0
-- Slow start lasts until the first overload (a reset starts it again).
local starting = fields[5] ~= '1'
local latency = tonumber(fields[6])
-- Bounds declared anew (a deploy) hold from the next report on.
local function bounded(x)
  return math.min(ceiling, math.max(floor, x))
end
rate = bounded(rate)

local why = ''
if kind ~= 'over' and rule == 'gradient' then
  -- Gradient2's rule, for a rate: the long average latency over this call's, at most halving;
  -- at 1 the rate grows by sqrt(rate) a second (its queue allowance), below it the rate shrinks.
  latency = latency and latency * 0.95 + elapsed * 0.05 or elapsed
  local gradient = math.max(0.5, math.min(1, latency / math.max(1, elapsed)))
  if gradient < 1 then
    rate = bounded(rate * (1 - 0.2 * (1 - gradient)))
  else
    rate = bounded(rate + math.sqrt(rate) / rate)
  end
elseif kind == 'ok' then
  local growth
  if rule == 'aimd' then
    growth = 1 / rate  -- one call a second more each second: a success a 1/rate of a second
  elseif starting then
    growth = 1  -- each call served makes room for one more: doubles each second
  else
    if peak > 0 and rate >= peak and now - cut_at > probe then
      peak = 0  -- the last overload's rate held for a probe time: the partner may have room again
    end
    growth = (peak > 0 and rate >= peak * 0.9) and slow or fast
  end
  rate = bounded(rate + growth)
elseif now - elapsed < cut_at then
  return {0, tostring(value), tostring(value), ''}  -- decided under the rate before the last cut
else
  if kind == 'over' then
    local near = rule == 'default' and not starting and value <= peak * 1.05
    peak = value
    starting = false
    rate = bounded(math.min(rate, value) * (near and near_cut or cut))
  else
    rate = bounded(math.min(rate, value) * gentle)
  end
  cut_at = now
  why = reason
end

local published = value
if why ~= '' or rate >= value * (1 + step) or rate <= value * (1 - step)
    or (rate == ceiling and value ~= ceiling) or bounded(value) ~= value then
  published = rate
  if why == '' then
    why = bounded(value) ~= value and 'bounds changed' or rate < value and 'latency gradient' or 'successes'
  end
elseif not fields[2] then
  why = 'start'
end
redis.call('HSET', state, '~rate', tostring(rate), '~peak', tostring(peak), '~cut', cut_at,
  '~floor', tostring(floor), '~ceiling', tostring(ceiling), '~grown', starting and '0' or '1')
if latency then
  redis.call('HSET', state, '~latency', tostring(latency))
end
if published == value and fields[2] then
  return {0, tostring(value), tostring(value), ''}
end
-- The wire form's unit is a call an hour, a bucket of `burst`: one call every 1/rate seconds.
local wire = math.max(1, math.floor(published * 3600 + 0.5)) .. ':3600000:' .. burst
redis.call('HSET', state, name, wire, '~value', tostring(published), '~reason', why, '~at', now)
if published ~= value then
  redis.call('HINCRBY', state, '~changes', 1)
end
-- The waiting calls' slots were placed by the old rate: given up (as an operator's change does,
-- rate_change.lua), each is decided anew under the new one when it comes back.
for _, member in ipairs(redis.call('ZRANGE', reserved, 0, -1)) do
  redis.call('ZREM', log, member)
end
redis.call('DEL', reserved)
for _, field in ipairs(redis.call('HKEYS', bucket)) do
  if string.sub(field, 1, 1) == 's' then
    redis.call('HDEL', bucket, field)
  end
end
return {published ~= value and 1 or 0, tostring(value), tostring(published), why}
