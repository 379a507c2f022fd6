-- Reset the lock's (or our permit's) TTL, only if it still holds our token.
-- KEYS[1] lock  KEYS[2] owner  KEYS[3] holders  KEYS[4] permits  ARGV[1] token  ARGV[2] ttl in ms
-- Returns 1 when extended, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
local now_ms = clock_ms()
if permit_expiry(KEYS[3], ARGV[1], now_ms) then
  redis.call('ZADD', KEYS[3], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
  expire_permits(KEYS[3], KEYS[4])
  return 1
end
return 0
