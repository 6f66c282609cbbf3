-- The copy tokens of a call put off (re-published under its task id): which copy of its message
-- is the live one, so a copy the broker gives out again after the re-publish is told apart.
-- The record is "live|pending": the copy known to be published, and the one being published.
-- KEYS[1]  the call's record
-- ARGV[1]  "claim": a copy arrives; "hand_on": it is about to publish a copy; "confirm": published
-- ARGV[2]  the token of the copy asking ("" for the message as first sent)
-- ARGV[3]  claim, confirm: ""; hand_on: the token of the copy it will publish
-- ARGV[4]  the record's TTL in ms
-- Returns  1 go on; 0 another copy is the live one (claim, hand_on) or took over (confirm);
--          2 (claim) no record: never put off, or its run ended (the record is deleted then)
local op, mine, next_token, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local record = redis.call('GET', KEYS[1])
local live, pending = nil, nil
if record then
  live, pending = string.match(record, '^([^|]*)|(.*)$')
end
if op == 'confirm' then
  if pending ~= mine or mine == '' then
    return 0
  end
  redis.call('SET', KEYS[1], mine .. '|', 'PX', ttl)
  return 1
end
if op == 'claim' and not record then
  return 2
end
-- claim, hand_on: the first of the live and the pending copy to ask wins; the other is stale.
if record and mine ~= live and (pending == '' or mine ~= pending) then
  return 0
end
if op == 'hand_on' then
  redis.call('SET', KEYS[1], mine .. '|' .. next_token, 'PX', ttl)
elseif record and (mine ~= live or pending ~= '') then
  redis.call('SET', KEYS[1], mine .. '|', 'PX', ttl)
end
return 1
