-- Take the lock and issue its fencing token in one atomic step.
-- KEYS[1] lock (string: token)  KEYS[2] owner (hash: holder, fence)  KEYS[3] fencing counter
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] holder description
-- Returns {1, fence} when acquired, {0, remaining ttl ms, holder} when taken.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- The counter never expires, so fencing tokens only grow for this name.
  local fence = redis.call('INCR', KEYS[3])
  redis.call('HSET', KEYS[2], 'holder', ARGV[3], 'fence', fence)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1]), redis.call('HGET', KEYS[2], 'holder') or ''}
