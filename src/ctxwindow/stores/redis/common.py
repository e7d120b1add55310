"""What both Redis stores share: the Lua scripts, key layout, options and error mapping.

``Layout`` knows the key names, builds the scripts' arguments and reads their
replies; ``Scripts`` registers the scripts on a client (sync or async); the
stores in ``aio`` and ``sync`` only send the commands.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.extras import install_hint
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    Checkpoint,
    Earlier,
    encode_entry,
    entry_from_json,
    page_start,
    redact_url,
    scrub,
)

logger = logging.getLogger("ctxwindow.stores")

INSTALL_HINT = install_hint("redis")
SCHEMES = ("redis", "rediss", "unix")
RELEASE_RETRY = 0.5  # seconds between the retries of a release the server did not take

# A cache's sessions expire without a word to the index of session ids: each write of a
# store with a ttl drops the members, among three random ones, whose entries are gone,
# which keeps the dead at about a third of the index at worst. (The keys it reads are not
# in KEYS: a cluster would refuse that, as it refuses a session's keys, which carry no
# hash tag.)
PRUNE = """
if ttl > 0 then
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
  local head = string.sub(entries, 1, #entries - #session)
  for _, member in ipairs(redis.call('ZRANDMEMBER', KEYS[5], 3)) do
    if redis.call('EXISTS', head .. member) == 0 then redis.call('ZREM', KEYS[5], member) end
  end
end
"""


def pruning(script: str) -> str:
    """``script`` with ``PRUNE`` in place of its ``-- PRUNE`` line."""
    return script.replace("-- PRUNE\n", PRUNE)


# KEYS: the session's keys and the index of session ids (see ``Layout.indexed_keys``).
APPEND = pruning("""
local entries, ids, keys = KEYS[1], KEYS[2], KEYS[3]
local ttl, key, session = tonumber(ARGV[1]), ARGV[2], ARGV[3]
if key ~= '' then
  local done = redis.call('HGET', keys, key)
  if done then
    local first, last = string.match(done, '^(%d+):(%d+)$')
    local reply = redis.call('LRANGE', entries, tonumber(first) - 1, tonumber(last) - 1)
    table.insert(reply, 1, 0)
    return reply
  end
end
local seen = {}
for i = 4, #ARGV, 2 do
  if seen[ARGV[i]] or redis.call('HEXISTS', ids, ARGV[i]) == 1 then return {-1, ARGV[i]} end
  seen[ARGV[i]] = true
end
local first = redis.call('LLEN', entries) + 1
if first == 1 and tonumber(redis.call('HGET', KEYS[4], 'seq') or '0') > 0 then
  redis.call('DEL', KEYS[4])  -- the checkpoint of entries that expired or were evicted
end
local seq = first
for i = 4, #ARGV, 2 do
  redis.call('RPUSH', entries, '{"seq":' .. seq .. ',' .. ARGV[i + 1])
  redis.call('HSET', ids, ARGV[i], seq)
  seq = seq + 1
end
if key ~= '' then redis.call('HSET', keys, key, first .. ':' .. (seq - 1)) end
if first == 1 then redis.call('ZADD', KEYS[5], 0, session) end
-- PRUNE
return {1, first}
""")

# A cache fill: the entries carry the durable store's sequence numbers and
# continue (or overlap) the list; a gap would misplace them, so it is refused. An
# overlapping entry must be the one held at its seq: another one means the copy is of
# entries the durable store has since removed (truncated, deleted), and it is dropped.
FILL = pruning("""
local entries, ids = KEYS[1], KEYS[2]
local ttl, seq, session = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local length = redis.call('LLEN', entries)
if seq > length + 1 then return -1 end
for i = 4, #ARGV, 2 do
  if seq <= length and tonumber(redis.call('HGET', ids, ARGV[i]) or '0') ~= seq then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
    redis.call('ZREM', KEYS[5], session)
    return -1
  end
  seq = seq + 1
end
seq = tonumber(ARGV[2])
for i = 4, #ARGV, 2 do
  if seq > length then
    redis.call('RPUSH', entries, ARGV[i + 1])
    redis.call('HSET', ids, ARGV[i], seq)
  end
  seq = seq + 1
end
if length == 0 then redis.call('ZADD', KEYS[5], 0, session) end
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
redis.call('ZREM', KEYS[5], ARGV[1])
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
  redis.call('ZREM', KEYS[5], session)
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


def load_redis() -> Any:
    """The ``redis`` package (with ``redis.asyncio``), or an ImportError saying what to install."""
    try:
        import redis
        import redis.asyncio
    except ImportError as exc:
        raise ImportError(f"the Redis stores need 'redis': {INSTALL_HINT}") from exc
    return redis


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


def earlier_page(found: Earlier, reply: Sequence[Any]) -> Earlier:
    """``found`` with one page of ``EARLIER`` (its reply) added."""
    kept = [entry_from_json(doc) for doc in reply[2:]]
    return Earlier(
        [*found.kept, *kept], found.entries + int(reply[0]), found.tokens + int(reply[1])
    )


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


def check_options(url: str, prefix: str, ttl: float | None, lock_ttl: float) -> None:
    """``ValueError`` for a URL that is not Redis's, an empty prefix, or a bad ttl."""
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in SCHEMES:
        raise ValueError(
            f"not a Redis URL: {redact_url(str(url))!r} (expected redis://, rediss:// or unix://)"
        )
    if not isinstance(prefix, str) or not prefix:
        raise ValueError("prefix must be a non-empty string")
    if ttl is not None and not ttl > 0:
        raise ValueError(f"ttl must be None or a positive number of seconds, got {ttl!r}")
    if isinstance(lock_ttl, bool) or not isinstance(lock_ttl, (int, float)) or not lock_ttl > 0:
        raise ValueError(f"lock_ttl must be a positive number of seconds, got {lock_ttl!r}")


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _append_body(entry: Entry) -> tuple[str, str]:
    """The entry's id and its JSON document without ``{"seq":N,``, which the script adds."""
    text = encode_entry(entry, 0)
    head = '{"id":' + json.dumps(entry.id, ensure_ascii=False) + ',"seq":0,'
    if text.startswith(head):  # the usual layout: cut the seq out without parsing
        return entry.id, text[1 : len(head) - 9] + text[len(head) - 1 :]
    data = json.loads(text)
    del data["seq"]
    return entry.id, json.dumps(data, ensure_ascii=False, separators=(",", ":"))[1:]


class Layout:
    """Key names, script arguments and replies, shared by the sync and async stores."""

    def __init__(self, url: str, prefix: str, ttl: float | None, lock_ttl: float) -> None:
        check_options(url, prefix, ttl, lock_ttl)
        self.raw_url = url
        # Set when the store closes: a call still under way then (a lock block ending
        # later) must not open a new connection, which nothing would ever close.
        self.closed = False
        self.url = redact_url(url)
        self.prefix = prefix
        self.ttl = ttl
        self.ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
        self.lock_ttl = lock_ttl
        self.lock_ttl_ms = max(1, round(lock_ttl * 1000))

    def keys(self, session_id: str) -> list[str]:
        """The session's entries list, ids hash, idempotency keys hash and checkpoint hash."""
        return [f"{self.prefix}:{kind}:{session_id}" for kind in "eikc"]

    def indexed_keys(self, session_id: str) -> list[str]:
        """The session's keys and the index of session ids: the keys of the scripts that
        create or remove a session (append, fill, delete, truncate)."""
        return [*self.keys(session_id), self.index_key]

    @property
    def index_key(self) -> str:
        """The sorted set of every session id (scores 0: ordered by their UTF-8 bytes)."""
        return f"{self.prefix}:sessions"

    @property
    def indexed_marker(self) -> str:
        """Set once the index holds the sessions written before it existed."""
        return f"{self.prefix}:sessions:indexed"

    def page_args(self, prefix: str, after: str | None, limit: int | None, tidy: bool) -> list[Any]:
        """The ``SESSIONS`` arguments of one page: ``ZRANGEBYLEX`` bounds, limit, key head,
        and whether to drop the ids of sessions that are gone from the index."""
        start, inclusive = page_start(prefix, after)
        low = (b"[" if inclusive else b"(") + start.encode()
        high = b"(" + prefix.encode() + b"\xff" if prefix else b"+"  # no UTF-8 holds 0xFF
        everything = limit is None or limit >= 2**32  # a sorted set holds fewer members
        return [low, high, -1 if everything else limit, f"{self.prefix}:e:", int(tidy)]

    def checkpoint_keys(self, session_id: str) -> list[str]:
        """The keys of the checkpoint scripts: the entries list and the checkpoint hash."""
        return [f"{self.prefix}:{kind}:{session_id}" for kind in "ec"]

    def entries_key(self, session_id: str) -> str:
        return f"{self.prefix}:e:{session_id}"

    def lease_key(self, session_id: str) -> str:
        return f"{self.prefix}:lock:{session_id}"

    def match(self, prefix: str) -> str:
        """The ``SCAN`` pattern of the entries lists of sessions starting with ``prefix``."""
        return f"{_glob_escape(self.prefix)}:e:{_glob_escape(prefix)}*"

    def session_of(self, key: bytes) -> str:
        return key.decode("utf-8")[len(self.prefix) + 3 :]

    def append_args(
        self, session_id: str, entries: Sequence[Entry], idempotency_key: str | None
    ) -> list[Any]:
        args: list[Any] = [self.ttl_ms, idempotency_key or "", session_id]
        for entry in entries:
            args.extend(_append_body(entry))
        return args

    def appended(self, session_id: str, args: list[Any], reply: list[Any]) -> list[Entry]:
        """The stored copies, from the reply of ``APPEND`` to ``args``."""
        status = int(reply[0])
        if status == -1:
            raise StoreError(
                f"Redis at {self.url}: entry id {reply[1].decode()!r} is already in session "
                f"{session_id!r} (entry ids are unique per session)"
            )
        if status == 0:  # a retried idempotency key: the first call's entries
            return [entry_from_json(doc) for doc in reply[1:]]
        first, bodies = int(reply[1]), args[4::2]  # copies, exactly as a load returns them
        return [entry_from_json(f'{{"seq":{first + i},{body}') for i, body in enumerate(bodies)]

    @staticmethod
    def checkpoint_of(reply: Any) -> Checkpoint | None:
        """``(seq, data)`` from the ``[seq, data]`` of a script (None: no checkpoint)."""
        return None if not reply or reply[0] is None else (int(reply[0]), bytes(reply[1]))

    def fill_args(self, session_id: str, entries: Sequence[Entry]) -> list[Any]:
        seqs = [entry.seq for entry in entries]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            raise ValueError("fill() takes entries with consecutive sequence numbers")
        args: list[Any] = [self.ttl_ms, seqs[0], session_id]
        for entry in entries:
            args += [entry.id, encode_entry(entry, entry.seq)]
        return args

    def health(self, started: float, persistence: dict[Any, Any] | StoreError) -> dict[str, Any]:
        """The health report, from ``INFO persistence`` or the error that asking it raised."""
        report: dict[str, Any] = {"ok": True, "store": "redis", "durable": False, "url": self.url}
        if isinstance(persistence, StoreError):
            return {**report, "ok": False, "error": str(persistence)}
        aof = str(persistence.get("aof_enabled", 0)) == "1"
        detail = (
            "append-only file on: appends are as safe as the server's appendfsync"
            if aof
            else "no append-only file: appends since the last snapshot are lost in a crash"
        )
        latency = round((time.perf_counter() - started) * 1000, 3)
        report.update(durable=aof, detail=detail, prefix=self.prefix, ttl=self.ttl)
        return {**report, "latency_ms": latency}

    def client_options(self, timeout: float, retry_class: Any) -> dict[str, Any]:
        """Timeouts, and no retries: a retried append could be applied twice."""
        backoff = load_redis().backoff.NoBackoff()
        return {
            "socket_connect_timeout": timeout,
            "socket_timeout": timeout,
            "retry": retry_class(backoff, 0),
        }

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Map redis-py errors to ``StoreError``/``StoreUnavailableError``; a ``StoreError``
        before anything is sent once the store is closed."""
        if self.closed:
            raise StoreError(f"the store at {self.url} is closed: cannot {action}")
        exceptions = load_redis().exceptions
        try:
            yield
        except exceptions.AuthenticationError as exc:  # a ConnectionError, but retrying won't help
            raise StoreError(
                f"Redis at {self.url} refused the credentials: {self._text(exc)}"
            ) from exc
        except (exceptions.ConnectionError, exceptions.TimeoutError) as exc:
            raise StoreUnavailableError(
                f"Redis at {self.url} is unavailable ({action}): {self._text(exc)}"
            ) from exc
        except exceptions.RedisError as exc:
            raise StoreError(f"Redis at {self.url}: {action} failed: {self._text(exc)}") from exc

    def _text(self, exc: BaseException) -> str:
        return scrub(str(exc) or type(exc).__name__, self.raw_url)

    # -- session locks: what a holder logs -------------------------------------------

    def still_leased(self, session_id: str, renewed: Any) -> bool:
        """Whether a renewal found the lease still ours; a lost one is logged."""
        if int(renewed) == 1:
            return True
        logger.warning(
            "the lock of session %r at %s was lost (its lease expired or was taken over)"
            " while the session was held",
            session_id,
            self.url,
        )
        return False

    def renewal_failed(self, session_id: str, exc: StoreError) -> None:
        logger.warning("could not renew the lock of session %r (retrying): %s", session_id, exc)

    def release_failed(self, session_id: str, exc: StoreError) -> None:
        logger.warning(
            "could not release the lock of session %r (retried every %s s until the server"
            " answers): %s",
            session_id,
            RELEASE_RETRY,
            exc,
        )


class Orphans:
    """Leases whose holder ended but could not delete them: retried until the server answers.

    Such a lease would otherwise keep its session locked for up to ``lock_ttl``
    after the server is back, or longer: a server restarted from its snapshot
    restores the lease, and a stalled one still runs the renewals it received
    while stopped. A take the client gave up on is one too: the stalled server
    may still run it when it resumes. Each is deleted only if it still holds its
    own token, so a later holder of the session is never touched. Shared by the
    holders' threads and the retrying one.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._guard = threading.Lock()
        self._leases: dict[tuple[str, str], str] = {}  # (lease key, token) -> session id

    def add(self, key: str, token: str, session_id: str) -> None:
        with self._guard:
            self._leases[key, token] = session_id

    def pending(self) -> list[tuple[str, str, str]]:
        """(key, token, session id) of each lease still to release."""
        with self._guard:
            return [(key, token, session) for (key, token), session in self._leases.items()]

    def released(self, key: str, token: str, session_id: str) -> None:
        with self._guard:
            self._leases.pop((key, token), None)
        logger.info("released the lock of session %r at %s late", session_id, self._url)
