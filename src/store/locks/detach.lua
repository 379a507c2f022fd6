-- A resumable lease's stream broke: keep the lease only for its grace, unless it was resumed
-- since (then it belongs to another stream, which vouches for a full TTL, and is left alone).
-- KEYS[1] lock  KEYS[2] holders  KEYS[3] permits
-- KEYS[4] the watched mark and channel: watchers learn of the shorter TTL (when it ends)
-- KEYS[5] the lock-delay key: kept the delay past the grace
-- ARGV[1] token  ARGV[2] grace in ms  ARGV[3] the attachment this server held
-- Returns 1 when the lease now ends after the grace, 0 when it was gone or resumed elsewhere.
local fence, attachment = ours(redis.call('GET', KEYS[1]), ARGV[1])
if fence then
  if attachments_of(attachment) ~= tonumber(ARGV[3]) then
    return 0
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  keep_with(KEYS[5], tonumber(ARGV[2]))
  announce(KEYS[4])
  return 1
end
local now_ms = clock_ms()
if permit_expiry(KEYS[2], ARGV[1], now_ms) then
  if (redis.call('HGET', KEYS[3], 'a:' .. ARGV[1]) or '0') ~= ARGV[3] then
    return 0
  end
  redis.call('ZADD', KEYS[2], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
  expire_permits(KEYS[2], KEYS[3])
  announce(KEYS[4])
  return 1
end
return 0
