-- Wraps a decision script (its source replaces the BODY line) so the call's decision is kept
-- in its record, in the same script call: the body runs as it would alone, its reply is pushed
-- as one entry on the call's record (a list, newest first), the reply returned unchanged.
-- KEYS[#KEYS]  the call's record (keys.record_key): in the slot of the body's keys on a cluster
-- ARGV tail    the record's TTL in ms, the decision's kind, the caller's fields (strings), and
--              last how many of these ARGV entries the record takes; taken off ARGV (and the
--              record off KEYS) before the body runs, so the body sees its own KEYS and ARGV
-- Entry        a JSON array [server ms, kind, reply, fields...]; a reply's integers as strings
--              (a fencing token has 16 digits, more than cjson's numbers keep). An untimed
--              newest entry ([0, "take", ttl ms, key]: the uncontended path's, pushed by a plain
--              LPUSH, no script) is given its time first: written when the key was last given
--              its TTL, so at now - TTL + PTTL
-- Returns      the body's reply
local record_count = tonumber(table.remove(ARGV))
local record_args = {}
for _ = 1, record_count do
  table.insert(record_args, 1, table.remove(ARGV))
end
local record_key = table.remove(KEYS)
local record_reply = (function()
-- BODY
end)()

local function record_text(value)
  if type(value) == 'number' and value == math.floor(value) then
    return string.format('%.0f', value)
  elseif type(value) == 'table' then
    local parts = {}
    for i, part in ipairs(value) do
      parts[i] = record_text(part)
    end
    return parts
  elseif value == nil or value == false then
    return false
  end
  return value
end

local record_time = redis.call('TIME')
local record_now = tonumber(record_time[1]) * 1000 + math.floor(tonumber(record_time[2]) / 1000)
local record_ttl = tonumber(record_args[1])
local newest = redis.call('LINDEX', record_key, 0)
if newest and string.sub(newest, 1, 3) == '[0,' then
  local untimed = cjson.decode(newest)
  local written = record_now - tonumber(untimed[3]) + redis.call('PTTL', record_key)
  if record_args[2] == 'lock' and untimed[2] == 'take' then
    -- The uncontended path's SET NX found the key held (this script is its next step): its
    -- entry said nothing true, this one says what happened.
    redis.call('LPOP', record_key)
  else
    untimed[1] = written
    redis.call('LSET', record_key, 0, cjson.encode(untimed))
  end
end
local entry = {record_now, record_args[2], record_text(record_reply)}
for i = 3, #record_args do
  entry[#entry + 1] = record_args[i]
end
redis.call('LPUSH', record_key, cjson.encode(entry))
redis.call('LTRIM', record_key, 0, 15)
redis.call('PEXPIRE', record_key, record_ttl)
return record_reply
