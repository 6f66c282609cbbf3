-- Queued calls start (or reach a worker): count each out of its tenant's and its lane's
-- backlog, once.
-- KEYS[1]  each lane's backlog (as fair_assign.lua)
-- KEYS[2]  each tenant's backlog (as fair_assign.lua)
-- KEYS[3]  each queued call (as fair_assign.lua)
-- ARGV     the calls' task ids (tickets), one or many
-- Returns  how many were counted out; one not queued here (counted out already, sent while
--          Redis was away, or the keys were flushed) changes nothing.
local counted = 0
for i = 1, #ARGV do
  local known = redis.call('HGET', KEYS[3], ARGV[i])
  if known then
    counted = counted + 1
    redis.call('HDEL', KEYS[3], ARGV[i])
    local tenant, lane = string.match(known, '^(.*)\t(%d+)$')
    local raw = redis.call('HGET', KEYS[2], tenant)
    if raw then
      local mine = cjson.decode(raw)
      local left = (mine[lane] or 0) - 1
      if left > 0 then
        mine[lane] = left
      else
        mine[lane] = nil
      end
      if next(mine) == nil then
        redis.call('HDEL', KEYS[2], tenant)
      else
        redis.call('HSET', KEYS[2], tenant, cjson.encode(mine))
      end
    end
    if redis.call('HINCRBY', KEYS[1], lane, -1) <= 0 then
      redis.call('HDEL', KEYS[1], lane)
    end
  end
end
return counted
