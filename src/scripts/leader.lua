-- Read an election's leader, first retiring a leader whose lease is gone (resigned, lost, or
-- expired after its server died), announcing that there is none.
-- KEYS[1] lock  KEYS[2] state  ARGV[1] channel
-- Returns {revision, has_leader (0/1), term, value, the lease's remaining ms (-2 if none)}.
local state = redis.call('HMGET', KEYS[2], 'rev', 'token', 'term', 'value')
local rev = tonumber(state[1]) or 0
if state[2] then
  if redis.call('GET', KEYS[1]) == state[2] then
    return {rev, 1, state[3], state[4], redis.call('PTTL', KEYS[1])}
  end
  rev = redis.call('HINCRBY', KEYS[2], 'rev', 1)
  redis.call('HDEL', KEYS[2], 'token', 'term', 'value')
  redis.call('SPUBLISH', ARGV[1], rev .. '\n0\n0\n0\n')
end
return {rev, 0, '0', '', -2}
