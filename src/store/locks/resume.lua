-- Reattach a lease whose stream broke, only if the token still holds it: renewed for a full TTL
-- again, and counted as a new attachment, so the server that held it before can no longer
-- shorten it (see detach.lua).
-- KEYS[1] lock  KEYS[2] owner  KEYS[3] holders  KEYS[4] permits  ARGV[1] token  ARGV[2] ttl in ms
-- Returns {fence, attachment} when resumed; {} when the lease is gone or was never this token's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  local attachment = redis.call('HINCRBY', KEYS[2], 'attached', 1)
  return {tonumber(redis.call('HGET', KEYS[2], 'fence')) or 0, attachment}
end
local now_ms = clock_ms()
if permit_expiry(KEYS[3], ARGV[1], now_ms) then
  redis.call('ZADD', KEYS[3], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
  local attachment = redis.call('HINCRBY', KEYS[4], 'a:' .. ARGV[1], 1)
  expire_permits(KEYS[3], KEYS[4])
  return {tonumber(redis.call('HGET', KEYS[4], 'f:' .. ARGV[1])) or 0, attachment}
end
return {}
