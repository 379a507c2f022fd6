-- Publish the leader of an election (on election, and on each proclaim), only if our token
-- still holds the election's lock.
-- KEYS[1] lock (see locks/lease.lua, prepended)  KEYS[2] state
-- ARGV[1] token  ARGV[2] term  ARGV[3] value  ARGV[4] channel  ARGV[5] lease TTL (ms)
-- Returns the state's new revision, or 0 when the lock is not ours.
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then
  return 0
end
-- The state's epoch names this copy of it: a Redis that restarted empty starts a new one, so
-- observers know the revisions began again. Within an epoch the revision only grows, so every
-- change gets a larger one: observers order and de-duplicate by it.
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch then
  local now = redis.call('TIME')
  epoch = now[1] .. string.format('%06d', now[2])
  redis.call('HSET', KEYS[2], 'epoch', epoch)
end
local rev = redis.call('HINCRBY', KEYS[2], 'rev', 1)
redis.call('HSET', KEYS[2], 'token', ARGV[1], 'term', ARGV[2], 'value', ARGV[3], 'ttl', ARGV[5])
-- Kept two lease TTLs past the leader's lease (each renewal pushes this on, see extend.lua), so a
-- leader whose server died leaves nothing behind; retire_stale.lua keeps a leaderless state as long.
redis.call('PEXPIRE', KEYS[2], 3 * tonumber(ARGV[5]))
-- Published from the script itself, so every change reaches observers in the order made.
-- Message: epoch, revision, has leader, term, lease TTL, value; one per line, the value last.
redis.call('SPUBLISH', ARGV[4],
  epoch .. '\n' .. rev .. '\n1\n' .. ARGV[2] .. '\n' .. ARGV[5] .. '\n' .. ARGV[3])
return rev
