-- Queued calls reach a worker: count each out of its backlog, once (count_out, above), and sweep
-- a few calls whose expiry passed.
-- ARGV[1]  the most expired calls to sweep
-- ARGV[2..] the calls' tickets, one or many
-- Returns  {how many tickets were counted out, how many expired calls were swept, how many
--          expired entries were taken (sweep, above)}; a ticket not
--          queued here (counted out already, sent while Redis was away, or the keys were
--          flushed) changes nothing.
local counted = 0
for i = 2, #ARGV do
  if count_out(ARGV[i]) then
    counted = counted + 1
  end
end
local swept, taken = sweep(tonumber(ARGV[1]))
return {counted, swept, taken}
