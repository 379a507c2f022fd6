-- Revoke holdings of a lock by force: every holder, or the one with a given fencing token.
-- KEYS[1] lock  KEYS[2] line  KEYS[3] deadlines  KEYS[4] holders  KEYS[5] permits
-- KEYS[6] the watched mark (announce in lease.lua)  KEYS[7] the revoked tokens (a set)
-- KEYS[8] the lock-delay key: a revoked lock's delay runs from now
-- ARGV[1] fencing token ('0': every holder)  ARGV[2] wake-up channel  ARGV[3] revocations channel
-- Returns {holder, fencing token, remaining ttl ms, ...} for each holding ended; {} if none.
-- Every server listens on the revocations channel (one per key prefix, plain PUBLISH, which a
-- Cluster carries to every node) and rechecks its leases of the lock named in the message.
local wanted = tonumber(ARGV[1])
local ended = {}
-- The tokens ended, and the longest TTL they had: their servers may renew before hearing.
local tokens, longest = {}, 0
local value = redis.call('GET', KEYS[1])
if value then
  local fence, holder = lease_of(value)
  if wanted == 0 or wanted == fence then
    ended = {holder, fence, redis.call('PTTL', KEYS[1])}
    tokens[1] = string.match(value, '^([^:]*):')
    longest = ended[3]
    redis.call('DEL', KEYS[1])
    local delay = tonumber(string.match(redis.call('GET', KEYS[8]) or '', '^%d+'))
    if delay and delay > 0 then
      redis.call('PEXPIRE', KEYS[8], delay)
    end
  end
else
  local now_ms = clock_ms()
  if live_permits(KEYS[4], KEYS[5], now_ms) > 0 then
    local held = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
    for i = 1, #held, 2 do
      local token = held[i]
      local fence = tonumber(redis.call('HGET', KEYS[5], 'f:' .. token)) or 0
      if wanted == 0 or wanted == fence then
        ended[#ended + 1] = redis.call('HGET', KEYS[5], 'h:' .. token) or ''
        ended[#ended + 1] = fence
        ended[#ended + 1] = tonumber(held[i + 1]) - now_ms
        tokens[#tokens + 1] = token
        longest = math.max(longest, ended[#ended])
        redis.call('ZREM', KEYS[4], token)
        forget_permit(KEYS[5], token)
      end
    end
    expire_permits(KEYS[4], KEYS[5])
  end
end
if #ended > 0 then
  redis.call('PUBLISH', ARGV[3], KEYS[1])
  -- As release.lua: the next waiter is granted at once.
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('SPUBLISH', ARGV[2], wake_message(KEYS[2], KEYS[4]))
  end
  announce(KEYS[6])
  if #tokens > 0 and longest > 0 then
    redis.call('SADD', KEYS[7], unpack(tokens))
    if redis.call('PTTL', KEYS[7]) < longest then
      redis.call('PEXPIRE', KEYS[7], longest)
    end
  end
end
return ended
