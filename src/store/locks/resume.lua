-- Reattach a lease whose stream broke, only if the token still holds it: renewed for a full TTL
-- again, and counted as a new attachment, so the server that held it before can no longer
-- shorten it (see detach.lua). Its max-hold ceiling and lock-delay stay as they were.
-- KEYS[1] lock  KEYS[2] holders  KEYS[3] permits  KEYS[4] the lock-delay key
-- ARGV[1] token  ARGV[2] ttl in ms
-- Returns {fence, attachment, ms left before its max-hold ceiling (-1: none), 1 if it has a
-- lock-delay} when resumed; {} when the lease is gone or was never this token's.
-- A lease past its max-hold ceiling is not resumed (its holder was, or will be, told MAX_HOLD):
-- resuming it would buy another TTL each time.
local fence, field, holder = ours(redis.call('GET', KEYS[1]), ARGV[1])
if fence then
  local attachment = attachments_of(field) + 1
  local ceiling = ceiling_of(field)
  local kept = attachment
  local left = -1
  if ceiling then
    left = ceiling - clock_ms()
    if left <= 0 then
      return {}
    end
    kept = attachment .. '/' .. string.format('%.0f', ceiling)
  end
  redis.call('SET', KEYS[1], lock_value(ARGV[1], fence, kept, holder), 'PX', ARGV[2])
  keep_with(KEYS[4], tonumber(ARGV[2]))
  return {tonumber(fence) or 0, attachment, left, redis.call('EXISTS', KEYS[4])}
end
local now_ms = clock_ms()
if permit_expiry(KEYS[2], ARGV[1], now_ms) then
  local ceiling = tonumber(redis.call('HGET', KEYS[3], 'd:' .. ARGV[1]))
  local left = -1
  if ceiling then
    left = ceiling - now_ms
    if left <= 0 then
      return {}
    end
  end
  redis.call('ZADD', KEYS[2], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
  local attached = redis.call('HINCRBY', KEYS[3], 'a:' .. ARGV[1], 1)
  expire_permits(KEYS[2], KEYS[3])
  return {tonumber(redis.call('HGET', KEYS[3], 'f:' .. ARGV[1])) or 0, attached, left, 0}
end
return {}
