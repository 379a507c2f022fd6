-- Redlock: raise this primary's fencing counter to the token issued from a majority's answers,
-- and record it as the holder's token if the lock (or a permit) here is ours. Counters only grow.
-- KEYS[1] lock  KEYS[2] the slot's fencing counter  KEYS[3] holders  KEYS[4] permits
-- ARGV[1] token  ARGV[2] fencing token
-- Returns 1 if the lock here is ours, 0 if not (the counter is raised either way).
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > last then
  redis.call('SET', KEYS[2], ARGV[2])
end
local _, attachment, holder = ours(redis.call('GET', KEYS[1]), ARGV[1])
if attachment then
  redis.call('SET', KEYS[1], lock_value(ARGV[1], ARGV[2], attachment, holder), 'KEEPTTL')
  return 1
end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('HSET', KEYS[4], 'f:' .. ARGV[1], ARGV[2])
  return 1
end
return 0
