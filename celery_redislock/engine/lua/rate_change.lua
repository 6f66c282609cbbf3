-- An operator's change of a rate-limited partition (a rate set or reset, a pause set or lifted):
-- every reservation is given up, so no call waits for a slot placed by what is no longer in force.
-- A waiting call keeps its hop tokens: when it comes back (its message's time is unchanged) it is
-- decided as a new call under what is in force then (rate_limit.lua), and a stale copy is still
-- told apart. The bucket rates' schedules go back to their starts.
-- KEYS[1..5]  the partition's log, reservations, hop tokens, bucket state, pause end
--             (keys.limit_keys)
-- ARGV[1]     "": the pause stays; "lift": it ends now; else a pause of that many ms from now,
--             replacing any (an operator may shorten one)
-- Returns     {reservations given up, ms that were left of the pause, ms left of it now}
local log, reserved, bucket, pause = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local members, calls = redis.call('ZRANGE', reserved, 0, -1), 0
for _, member in ipairs(members) do
  redis.call('ZREM', log, member)
  if string.sub(member, 1, 2) == 'r:' then  -- a call's unit 0 (keys.unit_member)
    calls = calls + 1
  end
end
redis.call('DEL', reserved)
for _, field in ipairs(redis.call('HKEYS', bucket)) do
  if string.sub(field, 1, 1) == 's' then
    redis.call('HDEL', bucket, field)
  end
end
local was = math.max(0, tonumber(redis.call('GET', pause) or 0) - now)
local left = was
if ARGV[1] == 'lift' then
  redis.call('DEL', pause)
  left = 0
elseif ARGV[1] ~= '' then
  left = tonumber(ARGV[1])
  redis.call('SET', pause, now + left, 'PX', left)
end
return {calls, was, left}
