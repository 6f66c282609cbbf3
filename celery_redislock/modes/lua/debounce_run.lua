-- debounce: a call's message is due; it runs if it is still its burst's latest call.
-- KEYS[1]  the key's "debounce" key (the latest call's task id)
-- KEYS[2]  the key's "burst" key (the burst's first-call time), deleted when the latest runs:
--          the next call starts a new burst
-- ARGV[1]  the call's task id
-- Returns  1 run (the latest; or nothing recorded: the keys expired, so it is not superseded),
--          else the task id of the later call that superseded it.
local latest = redis.call('GET', KEYS[1])
if latest and latest ~= ARGV[1] then
  return latest
end
redis.call('DEL', KEYS[2])
return 1
