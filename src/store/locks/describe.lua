-- Read who holds the lock (every holder of a semaphore or shared lock), atomically with TTLs.
-- KEYS[1] lock  KEYS[2] owner  KEYS[3] holders  KEYS[4] permits
-- Returns {} when free; else {kind, then remaining ttl ms, holder, fence for each holder}.
local ttl = redis.call('PTTL', KEYS[1])
if ttl ~= -2 then
  local owner = redis.call('HMGET', KEYS[2], 'holder', 'fence')
  return {'1', ttl, owner[1] or '', tonumber(owner[2]) or 0}
end
local now_ms = clock_ms()
if live_permits(KEYS[3], KEYS[4], now_ms) == 0 then
  return {}
end
local reply = {redis.call('HGET', KEYS[4], 'kind') or ''}
local held = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  local token = held[i]
  reply[#reply + 1] = tonumber(held[i + 1]) - now_ms
  reply[#reply + 1] = redis.call('HGET', KEYS[4], 'h:' .. token) or ''
  reply[#reply + 1] = tonumber(redis.call('HGET', KEYS[4], 'f:' .. token)) or 0
end
return reply
