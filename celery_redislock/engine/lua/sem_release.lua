-- Give back semaphore slots (compare-and-remove) and leave its queue.
-- KEYS[1]  the holders (sorted set, see sem_acquire.lua)
-- KEYS[2]  the waiters' queue
-- KEYS[3]  the waiters' liveness
-- ARGV[1]  "1" to match ARGV[3...] as prefixes of holder ids (a dead process's slots), else exact
-- ARGV[2]  a channel to PUBLISH KEYS[1] on when a slot or a place in the queue was freed ("" none)
-- ARGV[3...] the holder ids (or prefixes) to remove from the holders and from the queue
-- Returns  how many slots were given back (places left in the queue are not counted).
local holders, queue, alive = KEYS[1], KEYS[2], KEYS[3]
local prefix = ARGV[1] == '1'
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
  for _, id in ipairs(matching(holders)) do
    released = released + redis.call('ZREM', holders, id)
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
