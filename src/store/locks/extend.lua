-- Reset the lock's (or our permit's) TTL, only if it still holds our token.
-- KEYS[1] lock  KEYS[2] holders  KEYS[3] permits
-- KEYS[4] (optional) a key kept with the lease (keep_with in lease.lua: an election's state,
-- or a lock-delay key)
-- ARGV[1] token  ARGV[2] ttl in ms  ARGV[3] (optional) '1': a unary Extend, held to the lease's
-- max-hold: never past its ceiling, refused once it is reached
-- Returns 1 when extended (a unary Extend: the TTL set, in ms), 0 when the lock is gone or
-- someone else's, or its ceiling is reached.
local ttl = tonumber(ARGV[2])
local capped = ARGV[3] == '1'
-- What is left before `ceiling` (ms by this Redis's clock), or nil when there is no ceiling.
local function within_ceiling(ceiling)
  if capped and ceiling then
    return tonumber(ceiling) - clock_ms()
  end
  return nil
end
local _, attachment = ours(redis.call('GET', KEYS[1]), ARGV[1])
if attachment then
  local left = within_ceiling(ceiling_of(attachment))
  if left then
    if left <= 0 then
      return 0
    end
    ttl = math.min(ttl, left)
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  if KEYS[4] then
    keep_with(KEYS[4], ttl)
  end
  return capped and ttl or 1
end
local now_ms = clock_ms()
if permit_expiry(KEYS[2], ARGV[1], now_ms) then
  local left = within_ceiling(capped and redis.call('HGET', KEYS[3], 'd:' .. ARGV[1]))
  if left then
    if left <= 0 then
      return 0
    end
    ttl = math.min(ttl, left)
  end
  redis.call('ZADD', KEYS[2], 'XX', now_ms + ttl, ARGV[1])
  expire_permits(KEYS[2], KEYS[3])
  return capped and ttl or 1
end
return 0
