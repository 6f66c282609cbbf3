-- Prepended to fair_start.lua and fair_assign.lua (engine/fair_lanes.py joins them).
-- KEYS[1]  each lane's backlog (hash: lane -> calls queued)
-- KEYS[2]  each tenant's backlog (hash: tenant -> JSON object lane -> calls queued)
-- KEYS[3]  each queued call (hash: ticket -> tenant TAB lane)
-- KEYS[4]  the queued calls sent with an expiry (sorted set: ticket by when it expires)
-- KEYS[5]  each lane's marks (hash: 'g' lane -> its generation, 's' lane -> the last ticket
--          assigned to it); kept while any call is queued
-- A lane's field in KEYS[1..3] is lane + STRIDE * its generation: a lane the workers found empty
-- in the broker while counted busy gets a new generation (fair_heal.lua), and what was counted
-- under the old one (a restored snapshot's calls, long run) no longer counts.
local STRIDE = 1024

-- No call counted, none of an old generation: the marks go, as every other key has.
local function forget_marks()
  if KEYS[5] and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
    redis.call('DEL', KEYS[5])
  end
end

-- Count a queued call out of its tenant's and its lane's backlog, once: true if it was queued.
local function count_out(ticket)
  local known = redis.call('HGET', KEYS[3], ticket)
  if not known then
    return false
  end
  redis.call('HDEL', KEYS[3], ticket)
  redis.call('ZREM', KEYS[4], ticket)
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
  forget_marks()
  return true
end

-- Count out up to `limit` calls whose expiry has passed by the server's clock (a broker may drop
-- them unseen, RabbitMQ does): O(log N) each. Returns how many were still queued, and how many
-- expired entries it took (fewer than `limit`: none is left).
local function sweep(limit)
  if limit <= 0 then
    return 0, 0
  end
  local now = redis.call('TIME')
  local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now[1], 'LIMIT', 0, limit)
  local swept = 0
  for _, ticket in ipairs(expired) do
    redis.call('ZREM', KEYS[4], ticket)
    if count_out(ticket) then
      swept = swept + 1
    end
  end
  return swept, #expired
end

