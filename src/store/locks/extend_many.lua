#!lua flags=allow-cross-slot-keys
-- Reset the TTL of many locks at once, each only if it still holds its own token: the renewals
-- that fell due together on one node. Cross-slot keys are allowed (Redis 7): on a cluster every
-- key given here is served by the node the script runs on.
-- KEYS[2i-1] lock  KEYS[2i] owner  ARGV[2i-1] token  ARGV[2i] ttl in ms
-- Returns one 1 (extended) or 0 (gone or someone else's) per lock, in order.
local extended = {}
for i = 1, #KEYS / 2 do
  local lock, owner = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('GET', lock) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', lock, ARGV[2 * i])
    redis.call('PEXPIRE', owner, ARGV[2 * i])
    extended[i] = 1
  else
    extended[i] = 0
  end
end
return extended
