-- (Loaded after `#!lua flags=allow-cross-slot-keys` and lease.lua.)
-- Reset the TTL of many locks at once, each only if it still holds its own token: the renewals
-- that fell due together on one node. A cluster refuses declared keys of several slots even
-- with this flag, so KEYS[1] (the first lock) only routes the call to its node, and the locks
-- come in ARGV; the flag lets the script reach them, all served by that node (Redis 7).
-- A permit (semaphore, shared lock) lives in `<lock>:holders` and `<lock>:permits` instead
-- (see permits.lua), in the same slot. The lock's value: see lease.lua (prepended).
-- KEYS[1] the first lock
-- ARGV[4i-3] lock  ARGV[4i-2] token  ARGV[4i-1] ttl in ms
-- ARGV[4i] a key kept with the lease (keep_with in lease.lua: an election's state, a lock-delay
-- key), or ''
-- Returns one 1 (extended) or 0 (gone or someone else's) per lock, in order.
local now_ms = nil
local extended = {}
for i = 1, #ARGV / 4 do
  local lock, token, ttl, kept = ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i]
  extended[i] = 0
  local value = redis.call('GET', lock)
  if ours(value, token) then
    redis.call('PEXPIRE', lock, ttl)
    if kept ~= '' then
      keep_with(kept, tonumber(ttl))
    end
    extended[i] = 1
  elseif not value then
    local holders = lock .. ':holders'
    local expiry = tonumber(redis.call('ZSCORE', holders, token))
    if expiry then
      now_ms = now_ms or clock_ms()
      if expiry > now_ms then
        redis.call('ZADD', holders, 'XX', now_ms + tonumber(ttl), token)
        local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')[2]
        redis.call('PEXPIREAT', holders, last)
        redis.call('PEXPIREAT', lock .. ':permits', last)
        extended[i] = 1
      end
    end
  end
end
return extended
