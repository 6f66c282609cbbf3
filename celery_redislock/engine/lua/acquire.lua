-- Take a lock, re-enter it, or take over a lock handed over to the caller.
-- KEYS[1]  the lock key
-- KEYS[2]  (fencing only) the key's fence counter: keys.fence_key(KEYS[1]), same slot
-- ARGV[1]  the caller's holder id
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  a hand-over id the caller may take the lock over from ("" for none)
-- ARGV[4]  a suffix: a holder id ending with it may be taken over too ("" for none); a
--          lock taken at enqueue ends with "@queued" and yields to whichever execution
--          of that task comes first
-- ARGV[5]  (fencing only) how long the fence counter outlives this acquisition, in ms
-- Returns  1 taken, 2 re-entered (the caller already held it), 3 taken over (ARGV[3], ARGV[4]),
--          or, when someone else holds it, that holder's id (a string). With fencing, each
--          of 1, 2, 3 comes as {code, token, server seconds, server microseconds}: the token
--          is max(counter + 1, server time in microseconds), so it grows with every
--          acquisition, and still does after the counter is lost (a restart without
--          persistence) as long as the server's clock does not go back.
local function taken(code)
  if #KEYS < 2 then
    return code
  end
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local token = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now)
  local keep = math.max(tonumber(ARGV[5]), redis.call('PTTL', KEYS[2]))
  redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', keep)
  return {code, token, tonumber(time[1]), tonumber(time[2])}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return taken(1)
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return taken(2)
end
local suffix = ARGV[4]
if (ARGV[3] ~= '' and current == ARGV[3])
    or (suffix ~= '' and string.sub(current, -string.len(suffix)) == suffix) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return taken(3)
end
return current
