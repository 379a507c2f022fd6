-- Delete the lock, only if it still holds our token, and wake the waiters.
-- KEYS[1] lock  KEYS[2] owner  KEYS[3] line  ARGV[1] token  ARGV[2] wake-up channel
-- Returns 1 when released, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  -- Published from the script itself, so no release goes unannounced. The message names the
  -- head of the line, who goes first.
  redis.call('SPUBLISH', ARGV[2], redis.call('ZRANGE', KEYS[3], 0, 0)[1] or '')
  return 1
end
return 0
