-- Take a waiter out of line (it gave up or went away) and, if the lock may be free, wake the
-- line: also used with an empty waiter id when the server sees a lock expire.
-- KEYS[1] lock  KEYS[2] line  KEYS[3] waiter deadlines  KEYS[4] holders
-- KEYS[5] the watched mark and channel (announce in lease.lua)
-- ARGV[1] waiter id or ''  ARGV[2] channel
-- Returns 1 if waiters were woken.
-- Watchers hear of a waiter leaving, and of an expiry a server saw.
local changed = ARGV[1] == ''
if ARGV[1] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  changed = redis.call('ZREM', KEYS[3], ARGV[1]) == 1
end
if changed then
  announce(KEYS[5])
end
-- Only when someone still waits (every waiter has a deadline).
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SPUBLISH', ARGV[2], wake_message(KEYS[2], KEYS[4]))
  return 1
end
return 0
