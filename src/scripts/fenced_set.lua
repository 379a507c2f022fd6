-- Write a fenced value, refusing a fencing token older than one already seen.
-- KEYS[1] fence (highest token seen)  KEYS[2] data  ARGV[1] fencing token (decimal)  ARGV[2] value
-- Returns {1} when written, {0, highest token seen} when stale.
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if not token then
  return redis.error_reply('fencing token is not a number')
end
if token < seen then
  return {0, redis.call('GET', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return {1}
