-- Take the lock and issue its fencing token in one atomic step; keep fair waiters in line.
-- KEYS[1] lock (string: token)  KEYS[2] owner (hash: holder, fence)  KEYS[3] fencing counter
-- KEYS[4] line (zset: waiter id -> arrival, microseconds)  KEYS[5] waiter deadlines (zset: id -> ms)
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] holder description  ARGV[4] waiter id
-- ARGV[5] '1' if fair  ARGV[6] '1' to join the line if the lock is taken  ARGV[7] waiter ttl in ms
-- ARGV[8] wake-up channel  ARGV[9] arrival in microseconds for the line ('' : this Redis's clock)
-- Returns {1, fence} when acquired; {0, remaining ttl ms (-2: free), holder, position} when not
-- (position 1 is next in line; 0 means not in line).
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local now_ms = math.floor(now_us / 1000)

-- Waiters whose server stopped vouching for them (crashed, cut off) leave the line.
local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', KEYS[4], waiter)
  redis.call('ZREM', KEYS[5], waiter)
end

-- Ours already: an earlier attempt with this token landed though its answer was lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('ZREM', KEYS[4], ARGV[4])
  redis.call('ZREM', KEYS[5], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, redis.call('HGET', KEYS[2], 'fence') or redis.call('GET', KEYS[3]) or '0'}
end

local fair = ARGV[5] == '1'
local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
local my_turn = (not fair) or head == nil or head == ARGV[4]
if my_turn and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('ZREM', KEYS[4], ARGV[4])
  redis.call('ZREM', KEYS[5], ARGV[4])
  -- The token is above the last one this Redis remembers, and at least the Redis clock in
  -- microseconds: a Redis that lost its data (restart, FLUSHALL, failover) still issues tokens
  -- above every earlier one, as long as its clock has not gone back.
  local last = tonumber(redis.call('GET', KEYS[3]) or '0')
  -- Below 2^53, so exact in Lua's doubles; '%.0f' writes every digit.
  local fence = string.format('%.0f', math.max(last + 1, now_us))
  redis.call('SET', KEYS[3], fence)
  redis.call('HSET', KEYS[2], 'holder', ARGV[3], 'fence', fence)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, fence}
end

local position = 0
if fair and ARGV[6] == '1' then
  -- NX keeps the first arrival time across retries: that is the waiter's place.
  -- Passed on as a string: Lua would write a number this large with only 14 digits.
  local arrival = string.format('%.0f', now_us)
  if ARGV[9] ~= '' then
    arrival = ARGV[9]
  end
  redis.call('ZADD', KEYS[4], 'NX', arrival, ARGV[4])
  redis.call('ZADD', KEYS[5], now_ms + tonumber(ARGV[7]), ARGV[4])
  position = redis.call('ZRANK', KEYS[4], ARGV[4]) + 1
end
local ttl = redis.call('PTTL', KEYS[1])
if #dead > 0 and ttl == -2 then
  -- The line moved while the lock is free: wake its new head.
  redis.call('SPUBLISH', ARGV[8], redis.call('ZRANGE', KEYS[4], 0, 0)[1] or '')
end
return {0, ttl, redis.call('HGET', KEYS[2], 'holder') or '', position}
