-- Delete the lock, only if it still holds our token.
-- KEYS[1] lock  KEYS[2] owner  ARGV[1] token
-- Returns 1 when released, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
