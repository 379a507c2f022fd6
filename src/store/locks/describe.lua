-- Read who holds the lock, atomically with its TTL.
-- KEYS[1] lock  KEYS[2] owner
-- Returns {0} when free, {1, remaining ttl ms, holder, fence} when held.
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return {0}
end
local owner = redis.call('HMGET', KEYS[2], 'holder', 'fence')
return {1, ttl, owner[1] or '', tonumber(owner[2]) or 0}
