-- Reset the lock's (or our permit's) TTL, only if it still holds our token.
-- KEYS[1] lock  KEYS[2] holders  KEYS[3] permits
-- KEYS[4] (optional) a key kept two TTLs past the lease (an election's state)
-- ARGV[1] token  ARGV[2] ttl in ms
-- Returns 1 when extended, 0 when the lock is gone or someone else's.
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[4] then
    redis.call('PEXPIRE', KEYS[4], 3 * tonumber(ARGV[2]))
  end
  return 1
end
local now_ms = clock_ms()
if permit_expiry(KEYS[2], ARGV[1], now_ms) then
  redis.call('ZADD', KEYS[2], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
  expire_permits(KEYS[2], KEYS[3])
  return 1
end
return 0
