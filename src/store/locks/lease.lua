-- Prepended (when loaded) to every script that reads or writes a lock's value: the one key a
-- plain lock is, and the fencing counter of its hash slot (see keys.rs).
-- lock (string): <token>:<fencing token>:<attachment>:<holder>, with the lease's TTL; the
-- attachment field is `<attachments>`, or `<attachments>/<ceiling>` for a lease with a max-hold
-- (the ceiling in ms by this Redis's clock: a lease resumed on another server keeps it)
-- delay (string, lock-delay only): <delay ms>:<holder>, kept the delay past the lease's TTL

local function clock_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

local function lock_value(token, fence, attachment, holder)
  return token .. ':' .. fence .. ':' .. attachment .. ':' .. holder
end

-- The lease in `value` if `token` holds it: fence, attachment, holder; else nil. Our tokens
-- never contain ':', so only the whole token matches (a client's shorter guess does not).
local function ours(value, token)
  if value and string.sub(value, 1, #token + 1) == token .. ':' then
    return string.match(value, '^([^:]*):([^:]*):(.*)$', #token + 2)
  end
  return nil
end

-- The attachments counted in an attachment field, and the lease's max-hold ceiling (or nil).
local function attachments_of(field)
  return tonumber(string.match(field, '^[^/]*')) or 0
end
local function ceiling_of(field)
  return tonumber(string.match(field, '/(%d+)$'))
end

-- Renews the key kept with a lease to its TTL `ttl`: a lock-delay key (`...:delay`) to the
-- delay past it (nothing if it is gone), anything else (an election's state) to two TTLs past.
local function keep_with(kept, ttl)
  if string.sub(kept, -6) == ':delay' then
    local delay = redis.call('GET', kept)
    if delay then
      redis.call('PEXPIRE', kept, ttl + (tonumber(string.match(delay, '^%d+')) or 0))
    end
  else
    redis.call('PEXPIRE', kept, 3 * ttl)
  end
end

-- Whoever's lease `value` is: fence, holder ('' and 0 for a value we did not write).
local function lease_of(value)
  local _, fence, _, holder = string.match(value, '^([^:]*):([^:]*):([^:]*):(.*)$')
  return tonumber(fence) or 0, holder or ''
end

-- The slot's next fencing token: the counter + 1, or, when the counter is gone (a new slot, or
-- a Redis that lost its data), this Redis's clock in microseconds (`now_us`).
-- Why the clock is needed only then: every script takes Redis more than a microsecond, and Redis
-- runs one at a time, so a counter started from the clock never runs ahead of the clock; a
-- counter gone is replaced by the clock, which is then above every token it issued (unless the
-- clock went back meanwhile). While the counter lives, tokens grow whatever the clock does.
-- The counter can be ahead of this Redis's clock only when Redlock raised it to another
-- primary's token (raise_fence.lua); the majority keeps those tokens growing.
-- Below 2^53, so exact in Lua's doubles; '%.0f' writes every digit.
local function next_fence(counter, now_us)
  local last = tonumber(redis.call('GET', counter))
  if last then
    return string.format('%.0f', last + 1)
  end
  return string.format('%.0f', now_us)
end

-- The line (fair waiters) and the deadlines (every waiter) live as long as the last deadline.
local function expire_line(line, deadlines)
  local last = redis.call('ZRANGE', deadlines, -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', deadlines, last)
    redis.call('PEXPIREAT', line, last)
  end
end

-- Tells the name's watchers that its state changed, if any server watches it: `watched` is both
-- the mark watching servers keep alive (with a TTL) and the sharded channel they listen on.
local function announce(watched)
  if redis.call('EXISTS', watched) == 1 then
    redis.call('SPUBLISH', watched, '')
  end
end
