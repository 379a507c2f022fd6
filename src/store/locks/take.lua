-- A plain lock's common case, for what `SET NX PX` costs and little more: nobody waiting, no
-- permits held (every waiter has a deadline) and nobody watching; one EXISTS for those and the
-- lock, the counter's INCR and one SET. Few arguments on purpose: Redis spends more converting a script's arguments than on
-- most commands in it. Anything else (the lock taken, someone waiting, permits held, the lock
-- already ours) is acquire.lua's, which the caller runs next.
-- KEYS[1] lock  KEYS[2] the slot's fencing counter  KEYS[3] deadlines  KEYS[4] holders
-- KEYS[5] the watched mark (a watched name goes to acquire.lua, which announces the change)
-- KEYS[6] the lock-delay key (a name in its delay goes to acquire.lua, which refuses it)
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] holder description
-- Returns {1, fence} when acquired; {0} when acquire.lua must decide.
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6]) ~= 0 then
  return {0}
end
-- The clock is read only when the slot's counter is new (see next_fence in lease.lua).
-- '%.0f': Lua would write a number this large with only 14 digits.
local fence = string.format('%.0f', redis.call('INCR', KEYS[2]))
if fence == '1' then
  local now = redis.call('TIME')
  fence = string.format('%.0f', tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[2], fence)
end
redis.call('SET', KEYS[1], lock_value(ARGV[1], fence, 0, ARGV[3]), 'PX', ARGV[2])
return {1, fence}
