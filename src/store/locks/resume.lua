-- Reattach a lease whose stream broke, only if the token still holds it: renewed for a full TTL
-- again, and counted as a new attachment, so the server that held it before can no longer
-- shorten it (see detach.lua).
-- KEYS[1] lock  KEYS[2] holders  KEYS[3] permits  ARGV[1] token  ARGV[2] ttl in ms
-- Returns {fence, attachment} when resumed; {} when the lease is gone or was never this token's.
local fence, attachment, holder = ours(redis.call('GET', KEYS[1]), ARGV[1])
if fence then
  attachment = (tonumber(attachment) or 0) + 1
  redis.call('SET', KEYS[1], lock_value(ARGV[1], fence, attachment, holder), 'PX', ARGV[2])
  return {tonumber(fence) or 0, attachment}
end
local now_ms = clock_ms()
if permit_expiry(KEYS[2], ARGV[1], now_ms) then
  redis.call('ZADD', KEYS[2], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
  local attached = redis.call('HINCRBY', KEYS[3], 'a:' .. ARGV[1], 1)
  expire_permits(KEYS[2], KEYS[3])
  return {tonumber(redis.call('HGET', KEYS[3], 'f:' .. ARGV[1])) or 0, attached}
end
return {}
