-- The rest of release.lua (loaded after it and the helpers; its locals `lock`, `token`, `base`,
-- `value`, `held` are in scope): a release that is not a clean one of our lock, a permit's, or
-- one that someone waits for or watches.
local line, deadlines = base .. ':line', base .. ':deadlines'
local holders, permits = lock .. ':holders', lock .. ':permits'
local delay = base .. ':delay'
local released = 0
if held then
  if ARGV[2] ~= '1' then
    redis.call('DEL', lock)
    local delay_ms = tonumber(string.match(redis.call('GET', delay) or '', '^(%d+):'))
    if delay_ms then
      redis.call('PEXPIRE', delay, delay_ms)
    end
  end
  -- (A clean release deleted the lock and its delay key in release.lua.)
  released = 1
else
  local expiry = tonumber(redis.call('ZSCORE', holders, token))
  if expiry then
    -- An expired permit is forgotten too, but it was no longer ours to release.
    if expiry > clock_ms() then
      released = 1
    end
    redis.call('ZREM', holders, token)
    forget_permit(permits, token)
    expire_permits(holders, permits)
  end
end
-- Published from the script itself, so no release goes unannounced; only when someone waits
-- (every waiter has a deadline), so a lock nobody waits for pays for no message.
if released == 1 and redis.call('EXISTS', deadlines) == 1 then
  redis.call('SPUBLISH', base .. ':wake', wake_message(line, holders))
end
if released == 1 then
  announce(base .. ':watched')
end
return released
