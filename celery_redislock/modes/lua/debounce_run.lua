-- debounce: a call's message is due; it runs if it is still its burst's latest call.
-- KEYS[1]  the key's "debounce" key (the latest call's task id)
-- KEYS[2]  the key's "burst" key (the burst's first-call time), deleted when the latest runs:
--          the next call starts a new burst
-- KEYS[3]  the key's "calls" key (the task ids sent and not yet due): the call leaves it; once
--          it is empty no message can ask any more, so KEYS[1] goes with it (a call never
--          recorded there, sent by an older version, leaves the keys to their TTL)
-- ARGV[1]  the call's task id
-- Returns  {answer, now}, now the server's time (ms): answer 1 run (the latest), 0 run (nothing
--          recorded: the keys expired or were never written, so it is not superseded), else the
--          task id of the later call that superseded it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local latest = redis.call('GET', KEYS[1])
if redis.call('SREM', KEYS[3], ARGV[1]) == 1 and redis.call('SCARD', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
end
if latest and latest ~= ARGV[1] then
  return {latest, now}
end
redis.call('DEL', KEYS[2])
if latest then
  return {1, now}
end
return {0, now}
