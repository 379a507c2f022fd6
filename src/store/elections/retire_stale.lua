-- Read an election's leader, first retiring a leader whose lease is gone (resigned, lost, or
-- expired after its server died), announcing that there is none.
-- KEYS[1] lock (see locks/lease.lua, prepended)  KEYS[2] state  ARGV[1] channel
-- Returns {epoch, revision, has_leader (0/1), term, value, the lease's remaining ms (-2 if none)}.

-- A state without a leader is kept for twice its last leader's lease TTL (observers keep its
-- epoch across a quick re-election), or a minute if it never had one: reading elections that
-- never had a leader, or no longer have one, leaves no key behind for long.
local state = redis.call('HMGET', KEYS[2], 'epoch', 'rev', 'token', 'term', 'value', 'ttl')
local epoch, rev = state[1], tonumber(state[2]) or 0
local idle_ms = 60000
if state[6] then
  idle_ms = 2 * tonumber(state[6])
end
if not epoch then
  -- No state: a new election, or a Redis that lost it (restart, failover). Start an epoch and
  -- say there is no leader, so observers holding an older epoch's leader hear of it.
  local now = redis.call('TIME')
  epoch = now[1] .. string.format('%06d', now[2])
  redis.call('HSET', KEYS[2], 'epoch', epoch, 'rev', 0)
  redis.call('PEXPIRE', KEYS[2], idle_ms)
  redis.call('SPUBLISH', ARGV[1], epoch .. '\n0\n0\n0\n0\n')
elseif state[3] then
  if ours(redis.call('GET', KEYS[1]), state[3]) then
    return {epoch, rev, 1, state[4], state[5], redis.call('PTTL', KEYS[1])}
  end
  rev = redis.call('HINCRBY', KEYS[2], 'rev', 1)
  redis.call('HDEL', KEYS[2], 'token', 'term', 'value')
  redis.call('PEXPIRE', KEYS[2], idle_ms)
  redis.call('SPUBLISH', ARGV[1], epoch .. '\n' .. rev .. '\n0\n0\n0\n')
end
return {epoch, rev, 0, '0', '', -2}
