-- The operator's holds of an app (a hash: hold id -> the server time it ends at, in ms; 0: until
-- lifted): set one, lift one, or read those in force. A hold past its end is deleted as it is met.
-- KEYS[1]  the holds, keys.holds_key
-- ARGV[1]  'set', 'lift' or 'read'
-- ARGV[2]  the hold id ('set', 'lift')
-- ARGV[3]  its length in ms, 0: until lifted ('set')
-- Returns  'set', 'lift': the ms the hold there had left, -1 until lifted, -2 none;
--          'read': {id, ms left or -1, id, ms left or -1, ...}
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

-- What a stored end leaves: ms, -1 until lifted, -2 none (or over: then deleted; or not a
-- number, written by hand: left alone).
local function left(id, ends)
  ends = tonumber(ends)
  if not ends then
    return -2
  end
  if ends == 0 then
    return -1
  end
  if ends <= now_ms then
    redis.call('HDEL', KEYS[1], id)
    return -2
  end
  return ends - now_ms
end

local op = ARGV[1]
if op == 'read' then
  local found = {}
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local ms = left(all[i], all[i + 1])
    if ms ~= -2 then
      found[#found + 1] = all[i]
      found[#found + 1] = ms
    end
  end
  return found
end
local before = left(ARGV[2], redis.call('HGET', KEYS[1], ARGV[2]))
if op == 'set' then
  local ms = tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[2], ms > 0 and string.format('%d', now_ms + ms) or '0')
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
return before
