-- Keep one server's waiters in line, drop waiters nobody vouches for, and wake the line if the
-- lock may be free (a wake-up may have been lost). One call covers all of a server's waiters on a lock.
-- KEYS[1] lock  KEYS[2] line  KEYS[3] deadlines  KEYS[4] holders
-- KEYS[5] the watched mark and channel (announce in lease.lua)
-- ARGV[1] channel  ARGV[2] waiter ttl in ms  ARGV[3..] this server's waiter ids
-- Returns the number of waiters dropped.
local now_ms = clock_ms()
local deadline = now_ms + tonumber(ARGV[2])
-- XX: only waiters still waiting (every waiter has a deadline; fair ones are in line too).
-- Chunked, since Lua can only unpack so many arguments at once.
local batch = {}
for i = 3, #ARGV do
  batch[#batch + 1] = deadline
  batch[#batch + 1] = ARGV[i]
  if #batch >= 1000 or i == #ARGV then
    redis.call('ZADD', KEYS[3], 'XX', unpack(batch))
    batch = {}
  end
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end
expire_line(KEYS[2], KEYS[3])
if #dead > 0 then
  announce(KEYS[5])
end
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SPUBLISH', ARGV[1], wake_message(KEYS[2], KEYS[4]))
end
return #dead
