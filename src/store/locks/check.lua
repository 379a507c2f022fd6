-- (Loaded after `#!lua flags=no-writes`: a read, so it runs anywhere a read may, and writes
-- nothing, not even the expired permits acquire.lua would drop: those are skipped here.)
-- Is a fencing token the current holding of a name? One read of the lock, or of its permits.
-- KEYS[1] lock (see lease.lua)  KEYS[2] holders  KEYS[3] permits (see permits.lua)
-- ARGV[1] the fencing token asked about, in decimal
-- Returns {1, token} current; {2, the oldest live holder's token} superseded; {3, 0} free.
-- Tokens are compared as the decimal text every script writes ('%.0f'), so exactly.
local value = redis.call('GET', KEYS[1])
if value then
  local fence = string.match(value, '^[^:]*:([^:]*):') or '0'
  if fence == ARGV[1] then
    return {1, tonumber(fence)}
  end
  return {2, tonumber(fence) or 0}
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_ms, '+inf')
if #live == 0 then
  return {3, 0}
end
-- In chunks: Lua unpacks only so many arguments at once (a semaphore may have 10,000 holders).
local oldest = nil
for first = 1, #live, 1000 do
  local fields = {}
  for i = first, math.min(first + 999, #live) do
    fields[#fields + 1] = 'f:' .. live[i]
  end
  for _, fence in ipairs(redis.call('HMGET', KEYS[3], unpack(fields))) do
    if fence == ARGV[1] then
      return {1, tonumber(fence)}
    end
    local n = tonumber(fence)
    if n and (oldest == nil or n < oldest) then
      oldest = n
    end
  end
end
return {2, oldest or 0}
