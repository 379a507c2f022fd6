-- Let go of the lock (or of our permit), only if it still holds our token, and wake the waiters.
-- Loaded first, then lease.lua and permits.lua, then release_rest.lua: the common case (a clean
-- release of our plain lock, nobody waiting or watching) returns here, before the helpers are
-- defined (each run of a script defines them anew; issue 43). One key and two arguments for the
-- same reason as take.lua: the name's other keys are derived from the lock's, as keys.rs does.
-- KEYS[1] lock (`<base>:lock`)
-- ARGV[1] token
-- ARGV[2] '1': a clean release (the holder's own `release`): the name is free at once; else the
-- lease ended without one (its stream broke or half-closed without a grace, its server shut
-- down), and a lock-delay, if it has one, runs from now: its holder may still be writing.
-- Returns 1 when released, 0 when the lock is gone or someone else's.
local lock, token = KEYS[1], ARGV[1]
local base = string.sub(lock, 1, -6)
local value = redis.call('GET', lock)
-- Ours: the value starts with our whole token and ':' (our tokens never contain ':').
local held = value and string.sub(value, 1, #token + 1) == token .. ':'
if held and ARGV[2] == '1' then
  -- The lock-delay key, if any, goes with it.
  redis.call('DEL', lock, base .. ':delay')
  -- Nobody waiting (every waiter has a deadline) and nobody watching: nothing to tell.
  if redis.call('EXISTS', base .. ':deadlines', base .. ':watched') == 0 then
    return 1
  end
end
