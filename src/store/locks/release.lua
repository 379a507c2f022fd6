-- Let go of the lock (or of our permit), only if it still holds our token, and wake the waiters.
-- KEYS[1] lock  KEYS[2] line  KEYS[3] deadlines  KEYS[4] holders  KEYS[5] permits
-- KEYS[6] the watched mark and channel (announce in lease.lua)  KEYS[7] the lock-delay key
-- ARGV[1] token  ARGV[2] wake-up channel
-- ARGV[3] '1': a clean release (the holder's own `release`): the name is free at once; else the
-- lease ended without one (its stream broke or half-closed without a grace, its server shut
-- down), and a lock-delay, if it has one, runs from now: its holder may still be writing.
-- Returns 1 when released, 0 when the lock is gone or someone else's.
local released = 0
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('DEL', KEYS[1])
  if ARGV[3] == '1' then
    redis.call('DEL', KEYS[7])
  else
    local delay = tonumber(string.match(redis.call('GET', KEYS[7]) or '', '^(%d+):'))
    if delay then
      redis.call('PEXPIRE', KEYS[7], delay)
    end
  end
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
-- Published from the script itself, so no release goes unannounced; only when someone waits
-- (every waiter has a deadline), so a lock nobody waits for pays for no message.
if released == 1 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SPUBLISH', ARGV[2], wake_message(KEYS[2], KEYS[4]))
end
if released == 1 then
  announce(KEYS[6])
end
return released
