-- Assign a queued call of a tenant to a lane: the tenant keeps its lanes while it has a backlog,
-- and spreads onto the least-loaded other lane while it has fewer than its weight. First sweeps a
-- few calls whose expiry passed (sweep, above), so their lanes do not look busy for good.
-- ARGV[1]  the tenant
-- ARGV[2]  the call's ticket
-- ARGV[3]  the number of lanes
-- ARGV[4]  the tenant's weight: the most lanes it may use at once
-- ARGV[5]  when the call expires (Unix seconds), or '' for never
-- ARGV[6]  the most expired calls to sweep
-- ARGV[7]  the tenant's hashed lane: lanes equally loaded go to the first from there, so after
--          the counts were lost a tenant is not sent behind whatever fills the lowest lane
-- Returns  the lane (0 .. lanes - 1); a ticket queued already keeps its lane, counted once.
sweep(tonumber(ARGV[6]))
local known = redis.call('HGET', KEYS[3], ARGV[2])
if known then
  return tonumber(string.match(known, '\t(%d+)$')) % STRIDE
end
local lanes, weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local first = (tonumber(ARGV[7]) or 0) % lanes
local names = {}
for lane = 0, lanes - 1 do
  names[lane + 1] = 'g' .. lane
end
local gens = redis.call('HMGET', KEYS[5], unpack(names))
local fields = {}
for lane = 0, lanes - 1 do
  fields[lane + 1] = tostring(lane + STRIDE * (tonumber(gens[lane + 1]) or 0))
end
local loads = redis.call('HMGET', KEYS[1], unpack(fields))
local function load_of(lane)
  return tonumber(loads[lane + 1]) or 0
end
local mine = {}
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if raw then
  -- Only the lanes' current generations: what an older one counted has left its lane.
  for name, n in pairs(cjson.decode(raw)) do
    local lane = tonumber(name) % STRIDE
    if lane < lanes and fields[lane + 1] == name then
      mine[name] = n
    end
  end
end
local held, best, best_load = 0, nil, nil
for name, _ in pairs(mine) do
  local lane = tonumber(name) % STRIDE
  held = held + 1
  if best == nil or load_of(lane) < best_load then
    best, best_load = lane, load_of(lane)
  end
end
if held < weight then
  -- The least-loaded lane it does not use yet, taken only if it is less loaded than its own.
  local spare, spare_load = nil, nil
  for step = 0, lanes - 1 do
    local lane = (first + step) % lanes
    if mine[fields[lane + 1]] == nil and (spare == nil or load_of(lane) < spare_load) then
      spare, spare_load = lane, load_of(lane)
    end
  end
  if spare ~= nil and (best == nil or spare_load < best_load) then
    best = spare
  end
end
local field = fields[best + 1]
mine[field] = (mine[field] or 0) + 1
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(mine))
redis.call('HINCRBY', KEYS[1], field, 1)
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1] .. '\t' .. field)
redis.call('HSET', KEYS[5], 's' .. best, ARGV[2])
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[2])
end
return best
