-- Renew a batch of locks in one call; re-take those that are gone and free.
-- KEYS[i]       a lock key
-- ARGV[2i-1]    the holder id the caller holds KEYS[i] under
-- ARGV[2i]      the TTL in milliseconds for KEYS[i]
-- Returns       a list, one entry per key: 1 renewed, 2 re-taken (it was gone),
--               or the id of the other holder that has it now (a string); a key that is
--               not a string now (a semaphore of max_concurrency > 1) is reported so, and
--               does not fail the rest of the batch.
local result = {}
for i, key in ipairs(KEYS) do
  local holder = ARGV[2 * i - 1]
  local ttl = ARGV[2 * i]
  local current = redis.pcall('GET', key)
  if type(current) == 'table' and current.err then
    result[i] = 'a semaphore (' .. current.err .. ')'
  elseif current == holder then
    redis.call('PEXPIRE', key, ttl)
    result[i] = 1
  elseif not current then
    redis.call('SET', key, holder, 'PX', ttl)
    result[i] = 2
  else
    result[i] = current
  end
end
return result
