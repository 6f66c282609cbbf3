-- A lane's count set right by what its broker queue holds (the workers look: gates/fair_heal.py).
-- ARGV[1]  the lane
-- ARGV[2]  'empty': the lane was empty in the broker at two looks; reset its count if the last
--          call assigned to it is still ARGV[3] (none since the first look), by a new generation
--          (O(1): what was counted under the old one is ignored, and dropped as it is met).
--          'floor': the lane held ARGV[3] messages; count it at least that busy (calls sent while
--          the counts were lost are counted nowhere else).
-- Returns  the lane's count before.
local lane = ARGV[1]
local gen = tonumber(redis.call('HGET', KEYS[5], 'g' .. lane)) or 0
local field = tostring(tonumber(lane) + STRIDE * gen)
local load = tonumber(redis.call('HGET', KEYS[1], field)) or 0
if ARGV[2] == 'empty' then
  if load > 0 and (redis.call('HGET', KEYS[5], 's' .. lane) or '') == ARGV[3] then
    redis.call('HDEL', KEYS[1], field)
    redis.call('HSET', KEYS[5], 'g' .. lane, gen + 1)
    forget_marks()
  end
elseif tonumber(ARGV[3]) > load then
  redis.call('HSET', KEYS[1], field, ARGV[3])
end
return load
