-- Read who holds the lock (every holder of a semaphore or shared lock), atomically with TTLs,
-- and how many wait for it; for a watcher, also mark the name watched.
-- KEYS[1] lock  KEYS[2] holders  KEYS[3] permits  KEYS[4] deadlines (every waiter id -> ms)
-- KEYS[5] (a watcher's read) the watched mark  ARGV[1] (with KEYS[5]) its TTL in ms
-- Returns {waiting, ms until the first live waiter's deadline (-1: nobody waits), kind ('' when
-- free), then remaining ttl ms, holder, fence for each holder}.
if KEYS[5] then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[1])
end
local now_ms = clock_ms()
local waiting = redis.call('ZCOUNT', KEYS[4], '(' .. now_ms, '+inf')
local first = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local reply = {waiting, -1}
if first[2] then
  reply[2] = tonumber(first[2]) - now_ms
end
local value = redis.call('GET', KEYS[1])
if value then
  local fence, holder = lease_of(value)
  reply[3], reply[4], reply[5], reply[6] = '1', redis.call('PTTL', KEYS[1]), holder, fence
  return reply
end
if live_permits(KEYS[2], KEYS[3], now_ms) == 0 then
  reply[3] = ''
  return reply
end
reply[3] = redis.call('HGET', KEYS[3], 'kind') or ''
local held = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  local token = held[i]
  reply[#reply + 1] = tonumber(held[i + 1]) - now_ms
  reply[#reply + 1] = redis.call('HGET', KEYS[3], 'h:' .. token) or ''
  reply[#reply + 1] = tonumber(redis.call('HGET', KEYS[3], 'f:' .. token)) or 0
end
return reply
