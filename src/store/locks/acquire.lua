-- Take the lock (or one of its permits, or a shared hold) and issue its fencing token in one
-- atomic step; keep fair waiters in line.
-- KEYS[1] lock (string: token)  KEYS[2] owner (hash: holder, fence)  KEYS[3] fencing counter
-- KEYS[4] line (zset: waiter id -> arrival, microseconds)  KEYS[5] waiter deadlines (zset: id -> ms)
-- KEYS[6] holders  KEYS[7] permits (see permits.lua)
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] holder description  ARGV[4] waiter id
-- ARGV[5] '1' if fair  ARGV[6] '1' to join the line if the lock is taken  ARGV[7] waiter ttl in ms
-- ARGV[8] wake-up channel  ARGV[9] arrival in microseconds for the line ('' : this Redis's clock)
-- ARGV[10] kind: the limit ('1': a plain lock, a writer), or 'shared' (a reader)
-- Returns {1, fence} when acquired; {0, remaining ttl ms (-2: free), holder, position} when not
-- (position 1 is next in line; 0 means not in line); {2, kind held} when the name is held with
-- another limit (or shared against a semaphore).
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local now_ms = math.floor(now_us / 1000)
local token, ttl, me, kind = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[10]

-- Waiters whose server stopped vouching for them (crashed, cut off) leave the line.
local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', KEYS[4], waiter)
  redis.call('ZREM', KEYS[5], waiter)
end

local function leave_line()
  redis.call('ZREM', KEYS[4], me)
  redis.call('ZREM', KEYS[5], me)
end

-- Ours already: an earlier attempt with this token landed though its answer was lost.
local current = redis.call('GET', KEYS[1])
if current == token then
  leave_line()
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  return {1, redis.call('HGET', KEYS[2], 'fence') or redis.call('GET', KEYS[3]) or '0'}
end
local permits_held = live_permits(KEYS[6], KEYS[7], now_ms)
if permit_expiry(KEYS[6], token, now_ms) then
  leave_line()
  redis.call('ZADD', KEYS[6], now_ms + ttl, token)
  expire_permits(KEYS[6], KEYS[7])
  return {1, redis.call('HGET', KEYS[7], 'f:' .. token) or redis.call('GET', KEYS[3]) or '0'}
end

local exclusive_held = current ~= false
local held_kind = nil
if exclusive_held then
  held_kind = '1'
elseif permits_held > 0 then
  held_kind = redis.call('HGET', KEYS[7], 'kind') or kind
end
-- Readers and a writer are one read-write lock; any other difference is the caller's mistake.
local rw = (held_kind == '1' and kind == 'shared') or (held_kind == 'shared' and kind == '1')
if held_kind and held_kind ~= kind and not rw then
  return {2, held_kind}
end

local fair = ARGV[5] == '1'
-- How many waiters are ahead of this one: its place, or the whole line if it is not in it.
local function place()
  return redis.call('ZRANK', KEYS[4], me) or redis.call('ZCARD', KEYS[4])
end
local may_go = false
if kind == '1' then
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  may_go = permits_held == 0 and ((not fair) or head == nil or head == me)
elseif kind == 'shared' then
  -- Writer preference: readers coexist, but none passes a writer waiting ahead of it (a reader
  -- outside the line, racing or new, is behind every waiting writer).
  may_go = true
  local ahead = place()
  if ahead > 0 then
    for _, waiter in ipairs(redis.call('ZRANGE', KEYS[4], 0, ahead - 1)) do
      if string.sub(waiter, 1, 1) == 'x' then
        may_go = false
        break
      end
    end
  end
else
  local free = tonumber(kind) - permits_held
  may_go = free > 0 and ((not fair) or place() < free)
end

if may_go and not exclusive_held then
  leave_line()
  -- The token is above the last one this Redis remembers, and at least the Redis clock in
  -- microseconds: a Redis that lost its data (restart, FLUSHALL, failover) still issues tokens
  -- above every earlier one, as long as its clock has not gone back. One counter per name,
  -- whatever holds it, so tokens grow across permits, readers and writers alike.
  local last = tonumber(redis.call('GET', KEYS[3]) or '0')
  -- Below 2^53, so exact in Lua's doubles; '%.0f' writes every digit.
  local fence = string.format('%.0f', math.max(last + 1, now_us))
  redis.call('SET', KEYS[3], fence)
  if kind == '1' then
    redis.call('SET', KEYS[1], token, 'PX', ttl)
    redis.call('DEL', KEYS[2])
    redis.call('HSET', KEYS[2], 'holder', ARGV[3], 'fence', fence)
    redis.call('PEXPIRE', KEYS[2], ttl)
  else
    redis.call('ZADD', KEYS[6], now_ms + ttl, token)
    redis.call('HSET', KEYS[7], 'kind', kind, 'f:' .. token, fence, 'h:' .. token, ARGV[3])
    expire_permits(KEYS[6], KEYS[7])
  end
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
  redis.call('ZADD', KEYS[4], 'NX', arrival, me)
  redis.call('ZADD', KEYS[5], now_ms + tonumber(ARGV[7]), me)
  position = redis.call('ZRANK', KEYS[4], me) + 1
end
-- Who is in the way, and when the first of them expires (a waiter's timer for crashed holders).
local remaining, holder = -2, ''
if exclusive_held then
  remaining = redis.call('PTTL', KEYS[1])
  holder = redis.call('HGET', KEYS[2], 'holder') or ''
elseif permits_held > 0 then
  local first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
  remaining = tonumber(first[2]) - now_ms
  holder = redis.call('HGET', KEYS[7], 'h:' .. first[1]) or ''
end
if #dead > 0 and not exclusive_held then
  -- The line moved while the lock may be free: wake whoever may go now.
  redis.call('SPUBLISH', ARGV[8], wake_message(KEYS[4], KEYS[6]))
end
return {0, remaining, holder, position}
