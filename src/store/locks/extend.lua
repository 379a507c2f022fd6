-- Reset the lock's TTL, only if it still holds our token.
-- KEYS[1] lock  KEYS[2] owner  ARGV[1] token  ARGV[2] ttl in ms
-- Returns 1 when extended, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
