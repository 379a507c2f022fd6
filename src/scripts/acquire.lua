-- Take the lock and issue its fencing token in one atomic step.
-- KEYS[1] lock (string: token)  KEYS[2] owner (hash: holder, fence)  KEYS[3] fencing counter
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] holder description
-- Returns {1, fence} when acquired, {0, remaining ttl ms, holder} when taken.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- The token is above the last one this Redis remembers, and at least the Redis clock in
  -- microseconds: a Redis that lost its data (restart, FLUSHALL, failover) still issues tokens
  -- above every earlier one, as long as its clock has not gone back.
  local now = redis.call('TIME')
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('GET', KEYS[3]) or '0')
  -- Below 2^53, so exact in Lua's doubles; '%.0f' writes every digit.
  local fence = string.format('%.0f', math.max(last + 1, clock))
  redis.call('SET', KEYS[3], fence)
  redis.call('HSET', KEYS[2], 'holder', ARGV[3], 'fence', fence)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1]), redis.call('HGET', KEYS[2], 'holder') or ''}
