-- Read one election for List, changing nothing: its leader, if the leader's lease still holds.
-- KEYS[1] lock (see locks/lease.lua, prepended)  KEYS[2] state  KEYS[3] deadlines
-- Returns {} without a leader (none announced, or its lease gone: Leader and Observe retire it);
-- else {term, value, the lease's remaining ms, candidates waiting (their deadline not passed)}.
local state = redis.call('HMGET', KEYS[2], 'token', 'term', 'value')
if not state[1] or not ours(redis.call('GET', KEYS[1]), state[1]) then
  return {}
end
local waiting = redis.call('ZCOUNT', KEYS[3], '(' .. clock_ms(), '+inf')
return {state[2], state[3], redis.call('PTTL', KEYS[1]), waiting}
