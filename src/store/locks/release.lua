-- Let go of the lock (or of our permit), only if it still holds our token, and wake the waiters.
-- KEYS[1] lock  KEYS[2] owner  KEYS[3] line  KEYS[4] holders  KEYS[5] permits
-- ARGV[1] token  ARGV[2] wake-up channel
-- Returns 1 when released, 0 when the lock is gone or someone else's.
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  released = 1
else
  local expiry = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]))
  if expiry then
    -- An expired permit is forgotten too, but it was no longer ours to release.
    if expiry > clock_ms() then
      released = 1
    end
    redis.call('ZREM', KEYS[4], ARGV[1])
    forget_permit(KEYS[5], ARGV[1])
    expire_permits(KEYS[4], KEYS[5])
  end
end
if released == 1 then
  -- Published from the script itself, so no release goes unannounced.
  redis.call('SPUBLISH', ARGV[2], wake_message(KEYS[3], KEYS[4]))
end
return released
