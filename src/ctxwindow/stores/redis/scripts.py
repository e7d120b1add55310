"""The Lua scripts of the Redis stores, and ``Scripts``, which registers them on a client.

Each script is one store operation, run atomically by the server; the
comment above it says what its keys and arguments are. ``common.Layout``
builds them and reads the replies.
"""

from __future__ import annotations

from typing import Any

# A cache's sessions expire without a word to the index of session ids: each write of a
# store with a ttl drops the members, among three random ones, whose entries are gone,
# which keeps the dead at about a third of the index at worst. (The keys it reads are not
# in KEYS, which only one server allows: on a cluster, KEYS holds the session's keys
# alone, all in the slot of its hash tag, and the store keeps the index itself.)
PRUNE = """
if ttl > 0 then
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
  if KEYS[5] then
    local head = string.sub(entries, 1, #entries - #session)
    for _, member in ipairs(redis.call('ZRANDMEMBER', KEYS[5], 3)) do
      if redis.call('EXISTS', head .. member) == 0 then redis.call('ZREM', KEYS[5], member) end
    end
  end
end
"""


def pruning(script: str) -> str:
    """``script`` with ``PRUNE`` in place of its ``-- PRUNE`` line."""
    return script.replace("-- PRUNE\n", PRUNE)


# KEYS: the session's keys and, on one server, the index of session ids (see
# ``common.Layout.indexed_keys``). ARGV: ttl, idempotency key, session id, whether the
# call may create the session (on a cluster, not before the store put it in the index:
# the reply is then {2} and nothing is written), the seq and id the session's newest entry
# must have (``append_after``, 0 and '' for an empty session: else the reply is {3} and
# nothing is written; '' and '' for a plain append, which checks nothing), then an id and a
# body per entry. A used idempotency key is answered first, whatever the newest entry is.
APPEND = pruning("""
local entries, ids, keys = KEYS[1], KEYS[2], KEYS[3]
local ttl, key, session = tonumber(ARGV[1]), ARGV[2], ARGV[3]
if key ~= '' then
  local done = redis.call('HGET', keys, key)
  if done then
    -- written again, as it is: a WAIT after a retry then waits for the first call's write
    redis.call('HSET', keys, key, done)
    local first, last = string.match(done, '^(%d+):(%d+)$')
    local reply = redis.call('LRANGE', entries, tonumber(first) - 1, tonumber(last) - 1)
    table.insert(reply, 1, 0)
    return reply
  end
end
local first = redis.call('LLEN', entries) + 1
if ARGV[5] ~= '' then
  -- The newest entry is the one at the list's length, if the ids hash puts ARGV[6] there:
  -- its seq alone would pass a session truncated and refilled with other entries.
  local newest = tonumber(ARGV[5])
  if first - 1 ~= newest then return {3} end
  if newest > 0 and tonumber(redis.call('HGET', ids, ARGV[6]) or '0') ~= newest then
    return {3}
  end
end
if first == 1 and ARGV[4] == '0' then return {2} end
local seen = {}
for i = 7, #ARGV, 2 do
  if seen[ARGV[i]] or redis.call('HEXISTS', ids, ARGV[i]) == 1 then return {-1, ARGV[i]} end
  seen[ARGV[i]] = true
end
if first == 1 and tonumber(redis.call('HGET', KEYS[4], 'seq') or '0') > 0 then
  redis.call('DEL', KEYS[4])  -- the checkpoint of entries that expired or were evicted
end
local seq = first
for i = 7, #ARGV, 2 do
  redis.call('RPUSH', entries, '{"seq":' .. seq .. ',' .. ARGV[i + 1])
  redis.call('HSET', ids, ARGV[i], seq)
  seq = seq + 1
end
if key ~= '' then redis.call('HSET', keys, key, first .. ':' .. (seq - 1)) end
if first == 1 and KEYS[5] then redis.call('ZADD', KEYS[5], 0, session) end
-- PRUNE
return {1, first}
""")

# A cache fill: the entries carry the durable store's sequence numbers and
# continue (or overlap) the list; a gap would misplace them, so it is refused (-1). An
# overlapping entry must be the one held at its seq: another one means the copy is of
# entries the durable store has since removed (truncated, deleted), and it is dropped
# (-3). ARGV as APPEND's, with the first seq in place of the idempotency key and no
# newest entry to check (the entries from ARGV[5]): -2 is APPEND's {2}.
FILL = pruning("""
local entries, ids = KEYS[1], KEYS[2]
local ttl, seq, session = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local length = redis.call('LLEN', entries)
if seq > length + 1 then return -1 end
for i = 5, #ARGV, 2 do
  if seq <= length and tonumber(redis.call('HGET', ids, ARGV[i]) or '0') ~= seq then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
    if KEYS[5] then redis.call('ZREM', KEYS[5], session) end
    return -3
  end
  seq = seq + 1
end
if length == 0 and ARGV[4] == '0' then return -2 end
seq = tonumber(ARGV[2])
for i = 5, #ARGV, 2 do
  if seq > length then
    redis.call('RPUSH', entries, ARGV[i + 1])
    redis.call('HSET', ids, ARGV[i], seq)
  end
  seq = seq + 1
end
if length == 0 and KEYS[5] then redis.call('ZADD', KEYS[5], 0, session) end
-- PRUNE
return redis.call('LLEN', entries)
""")

GET = """
local seq = redis.call('HGET', KEYS[2], ARGV[1])
if not seq then return false end
return redis.call('LINDEX', KEYS[1], tonumber(seq) - 1)
"""

REPLAYED = """
local done = redis.call('HGET', KEYS[2], ARGV[1])
if not done then return false end
local first, last = string.match(done, '^(%d+):(%d+)$')
return redis.call('LRANGE', KEYS[1], tonumber(first) - 1, tonumber(last) - 1)
"""

# The checkpoint goes with the session, but only entries make it one that existed.
DELETE = """
local had = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('DEL', KEYS[4])
if KEYS[5] then redis.call('ZREM', KEYS[5], ARGV[1]) end
return had
"""

# Everything past ARGV[2] goes: the entries, their ids, the idempotency keys covering any of
# them ("first:last" with last past it) and a checkpoint past it. The reply: what was removed.
TRUNCATE = pruning("""
local entries, ids, keys = KEYS[1], KEYS[2], KEYS[3]
local ttl, after, session = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if after >= redis.call('LLEN', entries) then return {} end
local removed = redis.call('LRANGE', entries, after, -1)
for _, doc in ipairs(removed) do
  redis.call('HDEL', ids, cjson.decode(doc)['id'])
end
local done = redis.call('HGETALL', keys)
for i = 1, #done, 2 do
  if tonumber(string.match(done[i + 1], ':(%d+)$')) > after then
    redis.call('HDEL', keys, done[i])
  end
end
if tonumber(redis.call('HGET', KEYS[4], 'seq') or '-1') > after then
  redis.call('DEL', KEYS[4])
end
if after == 0 then
  redis.call('DEL', entries)
  if KEYS[5] then redis.call('ZREM', KEYS[5], session) end
else
  redis.call('LTRIM', entries, 0, after - 1)
end
-- PRUNE
return removed
""")

# A checkpoint never moves backwards, nor past the entries; with a ttl, saving one
# refreshes the whole session, so the checkpoint never outlives its entries.
SAVE_CHECKPOINT = """
local ttl, seq = tonumber(ARGV[1]), tonumber(ARGV[2])
local last = redis.call('LLEN', KEYS[1])
if seq > last then return last end
local stored = redis.call('HGET', KEYS[4], 'seq')
if not stored or tonumber(stored) <= seq then
  redis.call('HSET', KEYS[4], 'seq', ARGV[2], 'data', ARGV[3])
end
if ttl > 0 then
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ttl) end
end
return -1
"""

# A page of the index of session ids (KEYS[1]) between ARGV[1] and ARGV[2] (ZRANGEBYLEX
# bounds), at most ARGV[3] (-1: all), without the members whose entries list (ARGV[4] ..
# id) is gone (expired, evicted), which it drops from the index on the way unless ARGV[5]
# is '0' (a store opened read-only writes nothing). false: the index was never built
# (KEYS[2], its marker, is missing).
SESSIONS = """
if redis.call('EXISTS', KEYS[2]) == 0 then return false end
local low, high, limit, head, tidy = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local page = {}
while limit < 0 or #page < limit do
  local want = limit < 0 and -1 or limit - #page
  local batch = redis.call('ZRANGEBYLEX', KEYS[1], low, high, 'LIMIT', 0, want)
  if #batch == 0 then break end
  for _, member in ipairs(batch) do
    if redis.call('EXISTS', head .. member) == 1 then
      page[#page + 1] = member
    elseif tidy == '1' then
      redis.call('ZREM', KEYS[1], member)
    end
  end
  low = '(' .. batch[#batch]
end
return page
"""

# A checkpoint past the end of the list is one whose entries expired or were evicted
# (a cache): it covers nothing, so none is returned.
CHECKPOINT = """
local checkpoint = redis.call('HMGET', KEYS[2], 'seq', 'data')
if not checkpoint[1] or tonumber(checkpoint[1]) > redis.call('LLEN', KEYS[1]) then
  return false
end
return checkpoint
"""

# ARGV[1]: at most that many of the newest entries after the checkpoint (-1: all).
LOAD_FROM_CHECKPOINT = """
local checkpoint = redis.call('HMGET', KEYS[2], 'seq', 'data')
local start = 0
local length = redis.call('LLEN', KEYS[1])
if checkpoint[1] and tonumber(checkpoint[1]) <= length then
  start = tonumber(checkpoint[1])
else
  checkpoint = {false, false}
end
local limit = tonumber(ARGV[1])
if limit >= 0 and length - limit > start then start = length - limit end
local reply = {checkpoint[1], checkpoint[2]}
for _, doc in ipairs(redis.call('LRANGE', KEYS[1], start, -1)) do
  reply[#reply + 1] = doc
end
return reply
"""

# A lease is extended or deleted only by the holder whose token it still carries.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
DROP_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


# ``earlier`` of the entries at list indexes ARGV[1] to ARGV[2] (inclusive: one page, so
# that Redis is never held long): {count, tokens, docs...} — the count and stored tokens
# of those a window does not keep at any budget, then the documents of those it does
# (``kept_always``: pinned, or a system message), in order.
EARLIER = """
local count, tokens, reply = 0, 0, {0, 0}
for _, doc in ipairs(redis.call('LRANGE', KEYS[1], ARGV[1], ARGV[2])) do
  local entry = cjson.decode(doc)
  if entry.pinned == true or entry.message.role == 'system' then
    reply[#reply + 1] = doc
  else
    count, tokens = count + 1, tokens + entry.tokens
  end
end
reply[1], reply[2] = count, tokens
return reply
"""
EARLIER_PAGE = 4096  # entries one call of EARLIER reads


class Scripts:
    """The Lua scripts, registered on one client (``redis.Redis`` or ``redis.asyncio.Redis``)."""

    def __init__(self, client: Any) -> None:
        self.append = client.register_script(APPEND)
        self.fill = client.register_script(FILL)
        self.get = client.register_script(GET)
        self.replayed = client.register_script(REPLAYED)
        self.delete = client.register_script(DELETE)
        self.truncate = client.register_script(TRUNCATE)
        self.sessions = client.register_script(SESSIONS)
        self.save_checkpoint = client.register_script(SAVE_CHECKPOINT)
        self.checkpoint = client.register_script(CHECKPOINT)
        self.load_from_checkpoint = client.register_script(LOAD_FROM_CHECKPOINT)
        self.earlier = client.register_script(EARLIER)
        self.renew_lease = client.register_script(RENEW_LEASE)
        self.drop_lease = client.register_script(DROP_LEASE)
