-- Prepended to rate_limit.lua and rate_cancel.lua: a call's limits as the caller gives them (each
-- rate replaced by its runtime one), the server's clock, a call's unit entries, bucket rates.
-- KEYS[6i-5 .. 6i]       limit i's log, reservations, hop tokens, bucket state, pause end
--                        (keys.limit_keys), and the hash of its runtime rates (field: its name,
--                        value: its rates in wire form); limit 1 is the call's home: its
--                        records live there
-- ARGV[first]            the number of limits; then three per limit: its name ("": no runtime
--                        rate), its rates in wire form ('N:period ms:burst;...', burst 0: a
--                        window rate), the call's cost in it (units)
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function parse_rates(text)
  local rates, rebuilt = {}, {}
  for n, p, b in string.gmatch(text, '(%d+):(%d+):(%d+)') do
    local rate = {limit = tonumber(n), period = tonumber(p), burst = tonumber(b)}
    if rate.limit < 1 or rate.period < 1 then
      return nil
    end
    rates[#rates + 1] = rate
    rebuilt[#rebuilt + 1] = n .. ':' .. p .. ':' .. b
  end
  if table.concat(rebuilt, ';') ~= text then
    return nil
  end
  return rates
end

-- Each limit: its keys, rates, cost, and horizon (its longest period: what its log keeps).
local function read_limits(first)
  local limits = {}
  for i = 1, tonumber(ARGV[first]) do
    local a, k = first + 3 * i - 2, 6 * i - 5
    local name, wire = ARGV[a], ARGV[a + 1]
    if name ~= '' then
      wire = redis.call('HGET', KEYS[k + 5], name) or wire
    end
    local rates = parse_rates(wire)
    if not rates then
      error('rate limit ' .. KEYS[k] .. ': runtime rates of ' .. name .. ' in ' .. KEYS[k + 5] ..
        ' are not in the wire form N:period ms:burst: ' .. wire)
    end
    local horizon, windows = 0, false
    for _, rate in ipairs(rates) do
      horizon = math.max(horizon, rate.period)
      windows = windows or rate.burst == 0
    end
    limits[i] = {log = KEYS[k], reserved = KEYS[k + 1], hops = KEYS[k + 2], bucket = KEYS[k + 3],
      pause = KEYS[k + 4], overrides = KEYS[k + 5], name = name, rates = rates, cost = tonumber(ARGV[a + 2]),
      horizon = horizon, windows = windows}
  end
  return limits
end

-- How many entries a call has in a limit's log: a unit each where a window counts them, one
-- record in the call's home (limit 1) else, none in another limit of bucket rates only.
local function units(limit, i)
  if limit.windows then
    return limit.cost
  end
  return i == 1 and 1 or 0
end

-- keys.unit_member: unit 0 is the member, unit j has j after the kind's letter.
local function unit_member(member, j)
  if j == 0 then
    return member
  end
  return string.sub(member, 1, 1) .. j .. string.sub(member, 2)
end

local function add_units(key, score, member, count)
  for j = 0, count - 1 do
    redis.call('ZADD', key, score, unit_member(member, j))
  end
end

-- Removes the units of member; returns whether unit 0 was there.
local function remove_units(limit, member, count)
  local found = 0
  for j = 0, math.max(count, 1) - 1 do
    local unit = unit_member(member, j)
    local gone = redis.call('ZREM', limit.log, unit)
    redis.call('ZREM', limit.reserved, unit)
    if j == 0 then
      found = gone
    end
  end
  return found == 1
end

-- A bucket rate's emission interval (ms a unit), and the time a call of k units conforms to a
-- theoretical arrival time: a bucket of B units is full at the TAT, a unit refills every interval.
local function interval(rate)
  return rate.period / rate.limit
end

local function conforms_at(tat, rate, k)
  return tat - (rate.burst - k) * interval(rate)
end

-- TAT fields of bucket rate j: 's<j>' the schedule (reservations included), 'a<j>' the starts.
local function tat(limit, field, j)
  return tonumber(redis.call('HGET', limit.bucket, field .. j) or 0)
end
