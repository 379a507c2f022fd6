-- Take the lock (or one of its permits, or a shared hold) and issue its fencing token in one
-- atomic step; keep waiters in line.
-- KEYS[1] lock (string, see lease.lua)  KEYS[2] the slot's fencing counter
-- KEYS[3] line (zset: fair waiter id -> arrival, microseconds)
-- KEYS[4] deadlines (zset: every waiter id -> ms)  KEYS[5] holders  KEYS[6] permits (permits.lua)
-- KEYS[7] the watched mark and channel (announce in lease.lua)  KEYS[8] the lock-delay key
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] holder description  ARGV[4] waiter id
-- ARGV[5] '1' if fair  ARGV[6] '1' to join the line if the lock is taken  ARGV[7] waiter ttl in ms
-- ARGV[8] wake-up channel  ARGV[9] arrival in microseconds for the line ('' : this Redis's clock)
-- ARGV[10] kind: the limit ('1': a plain lock, a writer), or 'shared' (a reader)
-- ARGV[11] lock-delay in ms ('0': none; plain locks only)  ARGV[12] max-hold in ms ('0': none)
-- Returns {1, fence} when acquired; {0, remaining ttl ms (-2: free), holder, position} when not
-- (position 1 is next in line; 0 means not in line); {2, kind held} when the name is held with
-- another limit (or shared against a semaphore).
local token, ttl, me, kind = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[10]

-- (A plain lock's common case, nobody waiting and no permits held, is take.lua: the caller tries
-- it first.)
local current = redis.call('GET', KEYS[1])

local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local now_ms = math.floor(now_us / 1000)

-- Waiters whose server stopped vouching for them (crashed, cut off) leave the line.
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', KEYS[3], waiter)
  redis.call('ZREM', KEYS[4], waiter)
end
-- Watchers hear of every taking, a waiter joining or leaving, and waiters dropped.
local changed = #dead > 0

local function leave_line()
  redis.call('ZREM', KEYS[3], me)
  redis.call('ZREM', KEYS[4], me)
end

local function announced(reply)
  if changed then
    announce(KEYS[7])
  end
  return reply
end

-- Ours already: an earlier attempt with this token landed though its answer was lost.
local fence_held = ours(current, token)
if fence_held then
  leave_line()
  redis.call('PEXPIRE', KEYS[1], ttl)
  keep_with(KEYS[8], ttl)
  return announced({1, fence_held})
end
local permits_held = live_permits(KEYS[5], KEYS[6], now_ms)
if permit_expiry(KEYS[5], token, now_ms) then
  leave_line()
  redis.call('ZADD', KEYS[5], now_ms + ttl, token)
  expire_permits(KEYS[5], KEYS[6])
  return announced({1, redis.call('HGET', KEYS[6], 'f:' .. token) or '0'})
end

local exclusive_held = current ~= false
-- A lost holder's lock-delay still running: the name is taken by nobody, for everyone, until
-- its key expires (waiters keep their places; the head's timer is the delay's PTTL).
local delay_left = 0
if not exclusive_held and permits_held == 0 then
  delay_left = redis.call('PTTL', KEYS[8])
  if delay_left == -2 then
    delay_left = 0
  end
end
local held_kind = nil
if exclusive_held then
  held_kind = '1'
elseif permits_held > 0 then
  held_kind = redis.call('HGET', KEYS[6], 'kind') or kind
end
-- Readers and a writer are one read-write lock; any other difference is the caller's mistake.
local rw = (held_kind == '1' and kind == 'shared') or (held_kind == 'shared' and kind == '1')
if held_kind and held_kind ~= kind and not rw then
  return announced({2, held_kind})
end

local fair = ARGV[5] == '1'
-- How many waiters are ahead of this one: its place, or the whole line if it is not in it.
local function place()
  return redis.call('ZRANK', KEYS[3], me) or redis.call('ZCARD', KEYS[3])
end
local may_go = false
if kind == '1' then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  may_go = permits_held == 0 and ((not fair) or head == nil or head == me)
elseif kind == 'shared' then
  -- Writer preference: readers coexist, but none passes a writer waiting ahead of it (a reader
  -- outside the line, racing or new, is behind every waiting writer).
  may_go = true
  local ahead = place()
  if ahead > 0 then
    for _, waiter in ipairs(redis.call('ZRANGE', KEYS[3], 0, ahead - 1)) do
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

if may_go and not exclusive_held and delay_left == 0 then
  leave_line()
  -- One counter per slot, whatever holds the name, so tokens grow across permits, readers and
  -- writers alike.
  local fence = next_fence(KEYS[2], now_us)
  redis.call('SET', KEYS[2], fence)
  local max_hold = tonumber(ARGV[12])
  if kind == '1' then
    local attachment = '0'
    if max_hold > 0 then
      attachment = '0/' .. string.format('%.0f', now_ms + max_hold)
    end
    redis.call('SET', KEYS[1], lock_value(token, fence, attachment, ARGV[3]), 'PX', ttl)
    local delay = tonumber(ARGV[11])
    if delay > 0 then
      redis.call('SET', KEYS[8], delay .. ':' .. ARGV[3], 'PX', ttl + delay)
    end
  else
    redis.call('ZADD', KEYS[5], now_ms + ttl, token)
    redis.call('HSET', KEYS[6], 'kind', kind, 'f:' .. token, fence, 'h:' .. token, ARGV[3])
    if max_hold > 0 then
      redis.call('HSET', KEYS[6], 'd:' .. token, string.format('%.0f', now_ms + max_hold))
    end
    expire_permits(KEYS[5], KEYS[6])
  end
  changed = true
  return announced({1, fence})
end

local position = 0
if ARGV[6] == '1' then
  -- Every waiter has a deadline (a release wakes the line only when someone has one); a fair
  -- one also has a place in line. NX keeps the first arrival time across retries: that is the
  -- waiter's place. Passed on as a string: Lua would write a number this large with only 14
  -- digits.
  if redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[7]), me) == 1 then
    changed = true
  end
  if fair then
    local arrival = string.format('%.0f', now_us)
    if ARGV[9] ~= '' then
      arrival = ARGV[9]
    end
    redis.call('ZADD', KEYS[3], 'NX', arrival, me)
    position = redis.call('ZRANK', KEYS[3], me) + 1
  end
  expire_line(KEYS[3], KEYS[4])
end
-- Who is in the way, and when the first of them expires (a waiter's timer for crashed holders).
local remaining, holder = -2, ''
if exclusive_held then
  remaining = redis.call('PTTL', KEYS[1])
  local _
  _, holder = lease_of(current)
elseif permits_held > 0 then
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  remaining = tonumber(first[2]) - now_ms
  holder = redis.call('HGET', KEYS[6], 'h:' .. first[1]) or ''
elseif delay_left ~= 0 then
  remaining = delay_left
  holder = string.match(redis.call('GET', KEYS[8]) or '', '^%d+:(.*)$') or ''
end
if #dead > 0 and not exclusive_held and delay_left == 0 then
  -- The line moved while the lock may be free: wake whoever may go now.
  redis.call('SPUBLISH', ARGV[8], wake_message(KEYS[3], KEYS[5]))
end
return announced({0, remaining, holder, position})
