-- Record a call being sent as its key's latest, before it is published (a worker may take it at once).
-- KEYS[1]  the key's latest call ("{lock key}:latest")
-- ARGV[1]  the call's task id
-- ARGV[2]  milliseconds the record lives (until the call reaches a worker)
-- Returns  1
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
