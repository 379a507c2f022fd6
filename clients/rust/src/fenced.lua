-- Read or write a fenced value, refusing (and not recording) a fencing token older than one seen.
-- KEYS[1] fence (highest token seen)  KEYS[2] data
-- ARGV[1] fencing token (decimal)  ARGV[2] the value to write; absent for a read
-- Returns {1} or {1, value} when accepted (a read returns the value if there is one),
-- {0, highest token seen} when stale.
-- A read records its token too: once a newer holder has read, an older holder can no longer
-- write a value computed from what it read before.
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if not token then
  return redis.error_reply('fencing token is not a number')
end
if token < seen then
  return {0, redis.call('GET', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1])
if #ARGV >= 2 then
  redis.call('SET', KEYS[2], ARGV[2])
  return {1}
end
local value = redis.call('GET', KEYS[2])
if value then
  return {1, value}
end
return {1}
