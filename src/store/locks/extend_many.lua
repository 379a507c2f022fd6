#!lua flags=allow-cross-slot-keys
-- Reset the TTL of many locks at once, each only if it still holds its own token: the renewals
-- that fell due together on one node. A cluster refuses declared keys of several slots even
-- with this flag, so KEYS[1] (the first lock) only routes the call to its node, and the locks
-- come in ARGV; the flag lets the script reach them, all served by that node (Redis 7).
-- KEYS[1] the first lock
-- ARGV[4i-3] lock  ARGV[4i-2] owner  ARGV[4i-1] token  ARGV[4i] ttl in ms
-- Returns one 1 (extended) or 0 (gone or someone else's) per lock, in order.
local extended = {}
for i = 1, #ARGV / 4 do
  local lock, owner = ARGV[4 * i - 3], ARGV[4 * i - 2]
  if redis.call('GET', lock) == ARGV[4 * i - 1] then
    redis.call('PEXPIRE', lock, ARGV[4 * i])
    redis.call('PEXPIRE', owner, ARGV[4 * i])
    extended[i] = 1
  else
    extended[i] = 0
  end
end
return extended
