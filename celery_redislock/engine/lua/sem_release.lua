-- Give back semaphore slots (compare-and-remove) and leave its queue.
-- KEYS[1]  the holders (sorted set, see sem_acquire.lua)
-- KEYS[2]  the waiters' queue
-- KEYS[3]  the waiters' liveness
-- KEYS[4]  (an operator's release) the holders released by an operator (keys.released_key)
-- ARGV[1]  "1" to match ARGV[3...] as prefixes of holder ids (a dead process's slots), else
--          exact; "2" exact, an operator's release: each holder freed is noted in KEYS[4], so
--          that its renewal, should its task still run, does not take a free slot back
-- ARGV[2]  a channel to PUBLISH KEYS[1] on when a slot or a place in the queue was freed ("" none)
-- ARGV[3...] the holder ids (or prefixes) to remove from the holders and from the queue
-- Returns  how many slots were given back (places left in the queue are not counted).
local holders, queue, alive, noted = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix = ARGV[1] == '1'
local by_operator = ARGV[1] == '2'
local function matching(key)
  if not prefix then
    local ids = {}
    for i = 3, #ARGV do
      ids[#ids + 1] = ARGV[i]
    end
    return ids
  end
  local found = {}
  for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    for i = 3, #ARGV do
      if string.sub(member, 1, string.len(ARGV[i])) == ARGV[i] then
        found[#found + 1] = member
        break
      end
    end
  end
  return found
end

local released = 0
if redis.call('TYPE', holders).ok == 'zset' then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  for _, id in ipairs(matching(holders)) do
    local expires = redis.call('ZSCORE', holders, id)
    if expires then
      released = released + redis.call('ZREM', holders, id)
      if by_operator then
        -- A live holder renews before its slot runs out: twice what is left covers a late renewal.
        local keep = math.max(2 * (tonumber(expires) - now), 1000)
        redis.call('HSET', noted, id, 1)
        if redis.call('PTTL', noted) < keep then
          redis.call('PEXPIRE', noted, keep)
        end
      end
    end
  end
end
local left = 0
for _, id in ipairs(matching(queue)) do
  left = left + redis.call('ZREM', queue, id)
  redis.call('ZREM', alive, id)
end
if (released > 0 or left > 0) and ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], holders)
end
return released
