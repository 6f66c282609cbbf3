-- Renew a batch of locks in one call; re-take those that are gone and free, unless an operator
-- released them (release_by_operator.lua).
-- KEYS[2i-1]    a lock key
-- KEYS[2i]      the holders an operator released it from (keys.released_key)
-- ARGV[2i-1]    the holder id the caller holds KEYS[2i-1] under
-- ARGV[2i]      the TTL in milliseconds for KEYS[2i-1]
-- With no KEYS (Redis Cluster: one call per node for keys of many slots, which Redis refuses
-- as KEYS), ARGV holds quadruples instead: ARGV[4i-3] the key, ARGV[4i-2] its released holders,
-- ARGV[4i-1] the holder id, ARGV[4i] the TTL; the caller sends the call to the node serving
-- every one of those keys (a key and its released holders share a slot).
-- Returns       a list, one entry per key: 1 renewed, 2 re-taken (it was gone), 3 released by
--               an operator (not taken back, whoever holds it since), or the id of the other
--               holder that has it now (a string); a key that is not a string now (a semaphore of
--               max_concurrency > 1) is reported so, and does not fail the rest of the batch.
--               Any other error (a cluster key whose slot moved to another node) fails the
--               call, so the caller can re-route it.
local result = {}
local keyed = #KEYS > 0
local count = keyed and #KEYS / 2 or #ARGV / 4
for i = 1, count do
  local key, released, holder, ttl
  if keyed then
    key, released, holder, ttl = KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], ARGV[2 * i]
  else
    key, released, holder, ttl = ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i]
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
  elseif redis.call('HDEL', released, holder) == 1 then
    result[i] = 3
  elseif not current then
    redis.call('SET', key, holder, 'PX', ttl)
    result[i] = 2
  else
    result[i] = current
  end
end
return result
