-- Take a waiter out of line (it gave up or went away) and, if the lock is free, wake the line:
-- also used with an empty waiter id when the server sees a lock expire.
-- KEYS[1] lock  KEYS[2] line  KEYS[3] waiter deadlines  ARGV[1] waiter id or ''  ARGV[2] channel
-- Returns 1 if waiters were woken.
if ARGV[1] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SPUBLISH', ARGV[2], redis.call('ZRANGE', KEYS[2], 0, 0)[1] or '')
  return 1
end
return 0
