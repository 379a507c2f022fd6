-- Prepended (when loaded, after lease.lua) to every script that sees a name's permits: the
-- holders of a semaphore (limit > 1), or the readers of a shared lock. A plain lock (one exclusive holder)
-- keeps its token in the `lock` string instead, so its path pays nothing for this.
-- holders (zset: token -> expiry, ms by this Redis's clock)
-- permits (hash: kind = limit or 'shared', f:<token> fence, h:<token> holder, a:<token> attachments,
-- d:<token> the max-hold ceiling in ms by this Redis's clock, if any)

local function forget_permit(permits, token)
  redis.call('HDEL', permits, 'f:' .. token, 'h:' .. token, 'a:' .. token, 'd:' .. token)
end

-- Both keys live exactly as long as the longest-lived permit; gone with the last one.
local function expire_permits(holders, permits)
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', holders, last[2])
    redis.call('PEXPIREAT', permits, last[2])
  else
    redis.call('DEL', holders, permits)
  end
end

-- Drops the permits whose holders stopped renewing (a crashed holder's permit frees itself
-- here, without any server noticing); returns how many are still held.
local function live_permits(holders, permits, now_ms)
  local expired = redis.call('ZRANGEBYSCORE', holders, '-inf', now_ms)
  if #expired > 0 then
    for _, token in ipairs(expired) do
      forget_permit(permits, token)
    end
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_ms)
    expire_permits(holders, permits)
  end
  return redis.call('ZCARD', holders)
end

-- A live permit's expiry, or nil.
local function permit_expiry(holders, token, now_ms)
  local expiry = tonumber(redis.call('ZSCORE', holders, token))
  if expiry and expiry > now_ms then
    return expiry
  end
  return nil
end

-- What a wake-up says: the head of the line when only it may go next (a waiting writer or a
-- plain lock's waiter, ids starting 'x', and no permits held); otherwise '' (everyone tries:
-- several permits or readers may go at once).
local function wake_message(line, holders)
  local head = redis.call('ZRANGE', line, 0, 0)[1]
  if head and string.sub(head, 1, 1) == 'x' and redis.call('EXISTS', holders) == 0 then
    return head
  end
  return ''
end
