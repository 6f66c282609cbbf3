-- Renew a batch of locks in one call; re-take those that are gone and free.
-- KEYS[i]       a lock key
-- ARGV[2i-1]    the holder id the caller holds KEYS[i] under
-- ARGV[2i]      the TTL in milliseconds for KEYS[i]
-- With no KEYS (Redis Cluster: one call per node for keys of many slots, which Redis refuses
-- as KEYS), ARGV holds triples instead: ARGV[3i-2] the key, ARGV[3i-1] the holder id,
-- ARGV[3i] the TTL; the caller sends the call to the node serving every one of those keys.
-- Returns       a list, one entry per key: 1 renewed, 2 re-taken (it was gone),
--               or the id of the other holder that has it now (a string); a key that is
--               not a string now (a semaphore of max_concurrency > 1) is reported so, and
--               does not fail the rest of the batch. Any other error (a cluster key whose
--               slot moved to another node) fails the call, so the caller can re-route it.
local result = {}
local keyed = #KEYS > 0
local count = keyed and #KEYS or #ARGV / 3
for i = 1, count do
  local key, holder, ttl
  if keyed then
    key, holder, ttl = KEYS[i], ARGV[2 * i - 1], ARGV[2 * i]
  else
    key, holder, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  end
  local current = redis.pcall('GET', key)
  if type(current) == 'table' and current.err then
    if not string.find(current.err, 'WRONGTYPE', 1, true) then
      return current
    end
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
