-- A plain lock's common case, for what `SET NX PX` costs and little more: nobody waiting, no
-- permits held (every waiter has a deadline), nobody watching, no lock-delay running; one EXISTS
-- for those and the lock, the counter's INCR and one SET. Anything else (the lock taken, someone
-- waiting, permits held, the lock already ours) is acquire.lua's, which the caller runs next.
-- Cut to the bone (issue 43; measured in BENCHMARKS.md): loaded alone, without lease.lua's
-- helpers (each run of a script defines its helpers anew), and with two keys and three
-- arguments: Redis builds KEYS and ARGV as Lua tables on every call, growing them one element
-- at a time, so each argument costs about as much as deriving the same key here. The other keys
-- are the name's, derived from the lock's as keys.rs does, so in its slot (Cluster: a script may
-- reach undeclared keys of its own slot).
-- KEYS[1] lock (`<base>:lock`, its value as lease.lua's lock_value writes it)
-- KEYS[2] the slot's fencing counter
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] holder description
-- Returns the fence (a string) when acquired; 0 when acquire.lua must decide. A bare value, not
-- a table: a table costs Redis about 5 % of the pair's instructions (issue 43, BENCHMARKS.md).
local lock = KEYS[1]
local base = string.sub(lock, 1, -6)
if redis.call('EXISTS', lock, base .. ':deadlines', lock .. ':holders', base .. ':watched',
    base .. ':delay') ~= 0 then
  return 0
end
-- The clock is read only when the slot's counter is new (see next_fence in lease.lua).
-- '%d' writes every digit of a token (below 2^53) as an integer, where '%.0f' (the same text)
-- costs Redis a float's formatting, and Lua's own would keep only 14 digits.
local fence = string.format('%d', redis.call('INCR', KEYS[2]))
if fence == '1' then
  local now = redis.call('TIME')
  fence = string.format('%d', tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[2], fence)
end
-- lock_value(token, fence, 0, holder)
redis.call('SET', lock, ARGV[1] .. ':' .. fence .. ':0:' .. ARGV[3], 'PX', ARGV[2])
return fence
