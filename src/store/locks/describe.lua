-- Read who holds the lock (every holder of a semaphore or shared lock), atomically with TTLs.
-- KEYS[1] lock  KEYS[2] holders  KEYS[3] permits
-- Returns {} when free; else {kind, then remaining ttl ms, holder, fence for each holder}.
local value = redis.call('GET', KEYS[1])
if value then
  local fence, holder = lease_of(value)
  return {'1', redis.call('PTTL', KEYS[1]), holder, fence}
end
local now_ms = clock_ms()
if live_permits(KEYS[2], KEYS[3], now_ms) == 0 then
  return {}
end
local reply = {redis.call('HGET', KEYS[3], 'kind') or ''}
local held = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  local token = held[i]
  reply[#reply + 1] = tonumber(held[i + 1]) - now_ms
  reply[#reply + 1] = redis.call('HGET', KEYS[3], 'h:' .. token) or ''
  reply[#reply + 1] = tonumber(redis.call('HGET', KEYS[3], 'f:' .. token)) or 0
end
return reply
