-- Redlock: raise this primary's fencing counter to the token issued from a majority's answers,
-- and record it as the holder's token if the lock (or a permit) here is ours. Counters only grow.
-- KEYS[1] lock  KEYS[2] owner  KEYS[3] fencing counter  KEYS[4] holders  KEYS[5] permits
-- ARGV[1] token  ARGV[2] fencing token
-- Returns 1 if the lock here is ours, 0 if not (the counter is raised either way).
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
if tonumber(ARGV[2]) > last then
  redis.call('SET', KEYS[3], ARGV[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('HSET', KEYS[2], 'fence', ARGV[2])
  return 1
end
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then
  redis.call('HSET', KEYS[5], 'f:' .. ARGV[1], ARGV[2])
  return 1
end
return 0
