"""Redis session stores: ``RedisStore`` and ``AsyncRedisStore`` (redis-py).

Keys of one session (``P`` is the store's ``prefix``)::

    P:e:<session>   list of entry JSON documents; the entry with seq n is at index n-1
    P:i:<session>   hash: entry id -> seq
    P:k:<session>   hash: idempotency key -> "first_seq:last_seq"

An append is one Lua script: it reads the list's length, pushes the entries
with their sequence numbers written into the JSON, records their ids and the
idempotency key, all atomically on the server, so appends from any number of
processes never collide, and a retried key returns the first call's entries.
With ``ttl`` (seconds), every append refreshes the expiry of the session's
keys: the store is then a cache (the warm tier of a ``TieredStore``).

Session locks. ``lock(session_id)`` also holds the session against every
other process using the server: a lease, ``SET P:lock:<session> <token> NX PX
<lock_ttl>``, renewed every ``lock_ttl / 3`` while the block runs (by a
thread, or an asyncio task) and deleted at the end only if it still holds
this holder's random token. A holder that dies without releasing it (``kill
-9``) keeps the session locked until the lease expires: at most ``lock_ttl``
seconds (30 by default). A lease found lost while held (the block outlived
it, say because the renewal could not reach the server) is logged as a
warning.

Durability is the server's: an append that returned is in Redis memory, and
on disk only as the server's persistence is configured (``appendonly yes``
with ``appendfsync always`` for every write; the default ``everysec`` can lose
about a second). Commands are not retried by the client (a retried append
could be applied twice); callers retry with an idempotency key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    AsyncStore,
    Store,
    check_count,
    check_entries,
    check_idempotency_key,
    check_replay_key,
    check_session_id,
    entry_from_json,
    entry_to_json,
    redact_url,
    scrub,
)
from ctxwindow.stores.locks import async_poll, poll

if TYPE_CHECKING:
    import redis
    import redis.asyncio

logger = logging.getLogger("ctxwindow.stores")

INSTALL_HINT = "pip install 'ctxwindow[redis]'"
SCHEMES = ("redis", "rediss", "unix")

_APPEND = """
local entries, ids, keys = KEYS[1], KEYS[2], KEYS[3]
local ttl, key = tonumber(ARGV[1]), ARGV[2]
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
for i = 3, #ARGV, 2 do
  if seen[ARGV[i]] or redis.call('HEXISTS', ids, ARGV[i]) == 1 then return {-1, ARGV[i]} end
  seen[ARGV[i]] = true
end
local first = redis.call('LLEN', entries) + 1
local seq = first
for i = 3, #ARGV, 2 do
  redis.call('RPUSH', entries, '{"seq":' .. seq .. ',' .. ARGV[i + 1])
  redis.call('HSET', ids, ARGV[i], seq)
  seq = seq + 1
end
if key ~= '' then redis.call('HSET', keys, key, first .. ':' .. (seq - 1)) end
if ttl > 0 then
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ttl) end
end
return {1, first}
"""

# A cache fill: the entries carry the durable store's sequence numbers and
# continue (or overlap) the list; a gap would misplace them, so it is refused.
_FILL = """
local entries, ids = KEYS[1], KEYS[2]
local ttl, seq = tonumber(ARGV[1]), tonumber(ARGV[2])
local length = redis.call('LLEN', entries)
if seq > length + 1 then return -1 end
for i = 3, #ARGV, 2 do
  if seq > length then
    redis.call('RPUSH', entries, ARGV[i + 1])
    redis.call('HSET', ids, ARGV[i], seq)
  end
  seq = seq + 1
end
if ttl > 0 then
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ttl) end
end
return redis.call('LLEN', entries)
"""

_GET = """
local seq = redis.call('HGET', KEYS[2], ARGV[1])
if not seq then return false end
return redis.call('LINDEX', KEYS[1], tonumber(seq) - 1)
"""


_REPLAYED = """
local done = redis.call('HGET', KEYS[2], ARGV[1])
if not done then return false end
local first, last = string.match(done, '^(%d+):(%d+)$')
return redis.call('LRANGE', KEYS[1], tonumber(first) - 1, tonumber(last) - 1)
"""

# A lease is extended or deleted only by the holder whose token it still carries.
_RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_DROP_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _redis() -> Any:
    try:
        import redis
        import redis.asyncio
    except ImportError as exc:
        raise ImportError(f"the Redis stores need 'redis': {INSTALL_HINT}") from exc
    return redis


def _check_options(url: str, prefix: str, ttl: float | None, lock_ttl: float) -> None:
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
    try:
        text = entry_to_json(replace(entry, seq=0))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"entry {entry.id!r} cannot be stored as JSON: {exc}") from exc
    head = '{"id":' + json.dumps(entry.id, ensure_ascii=False) + ',"seq":0,'
    if text.startswith(head):  # the usual layout: cut the seq out without parsing
        return entry.id, text[1 : len(head) - 9] + text[len(head) - 1 :]
    data = json.loads(text)
    del data["seq"]
    return entry.id, json.dumps(data, ensure_ascii=False, separators=(",", ":"))[1:]


def _checked_range(after: int, limit: int | None) -> tuple[int, int] | None:
    """``after``/``limit`` as an inclusive LRANGE (stop -1: to the end); None: nothing."""
    check_count("after", after)
    check_count("limit", limit)
    if limit == 0:
        return None
    return after, -1 if limit is None else after + limit - 1


def _checked_count(n: int) -> int:
    check_count("n", n)
    return n


class _Layout:
    """Key names, script arguments and replies, shared by the sync and async stores."""

    def __init__(self, url: str, prefix: str, ttl: float | None, lock_ttl: float) -> None:
        _check_options(url, prefix, ttl, lock_ttl)
        self.raw_url = url
        self.url = redact_url(url)
        self.prefix = prefix
        self.ttl = ttl
        self.ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
        self.lock_ttl = lock_ttl
        self.lock_ttl_ms = max(1, round(lock_ttl * 1000))

    def keys(self, session_id: str) -> list[str]:
        check_session_id(session_id)
        return [f"{self.prefix}:{kind}:{session_id}" for kind in "eik"]

    def lease_key(self, session_id: str) -> str:
        return f"{self.prefix}:lock:{session_id}"

    def replay_args(self, session_id: str, key: str) -> tuple[list[str], list[str]]:
        """The keys and arguments of ``_REPLAYED``: the entries list and the keys hash."""
        check_replay_key(key)
        entries, _, keys = self.keys(session_id)
        return [entries, keys], [key]

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
            "could not release the lock of session %r; it expires within %s s: %s",
            session_id,
            self.lock_ttl,
            exc,
        )

    def match(self, prefix: str | None) -> str:
        if prefix is not None and not isinstance(prefix, str):
            raise StoreError("a session prefix must be a string")
        return f"{_glob_escape(self.prefix)}:e:{_glob_escape(prefix or '')}*"

    def session_of(self, key: bytes) -> str:
        return key.decode("utf-8")[len(self.prefix) + 3 :]

    def append_args(self, entries: Sequence[Entry], idempotency_key: str | None) -> list[Any]:
        args: list[Any] = [self.ttl_ms, idempotency_key or ""]
        for entry in entries:
            args.extend(_append_body(entry))
        return args

    def fill_args(self, entries: Sequence[Entry]) -> list[Any]:
        seqs = [entry.seq for entry in entries]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            raise ValueError("fill() takes entries with consecutive sequence numbers")
        args: list[Any] = [self.ttl_ms, seqs[0]]
        for entry in entries:
            args += [entry.id, entry_to_json(entry)]
        return args

    def appended(self, session_id: str, args: list[Any], reply: list[Any]) -> list[Entry]:
        status = int(reply[0])
        if status == -1:
            raise StoreError(
                f"Redis at {self.url}: entry id {reply[1].decode()!r} is already in session "
                f"{session_id!r} (entry ids are unique per session)"
            )
        if status == 0:  # a retried idempotency key: the first call's entries
            return [entry_from_json(doc) for doc in reply[1:]]
        first, bodies = int(reply[1]), args[3::2]  # copies, exactly as a load returns them
        return [entry_from_json(f'{{"seq":{first + i},{body}') for i, body in enumerate(bodies)]

    def health(self, started: float, persistence: dict[Any, Any] | StoreError) -> dict[str, Any]:
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

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Map redis-py errors to ``StoreError``/``StoreUnavailableError``."""
        exceptions = _redis().exceptions
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

    def client_options(self, timeout: float, retry_class: Any) -> dict[str, Any]:
        backoff = _redis().backoff.NoBackoff()
        return {
            "socket_connect_timeout": timeout,
            "socket_timeout": timeout,
            "retry": retry_class(backoff, 0),
        }

    def check_open(self, closed: bool) -> None:
        if closed:
            raise StoreError(f"Redis store {self.url} is closed")


class RedisStore(Store):
    """Sessions in Redis; ``ttl`` (seconds) makes it a cache whose sessions expire when idle.

    ``lock_ttl`` is the lease of a session lock, in seconds: how long a holder
    that died keeps the session locked (see the module docs).

    Example: ``RedisStore("redis://127.0.0.1:6379/0", ttl=3600)``.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ctxwindow",
        ttl: float | None = None,
        timeout: float = 5.0,
        lock_ttl: float = 30.0,
    ) -> None:
        self._layout = _Layout(url, prefix, ttl, lock_ttl)
        self.url = self._layout.url
        self.prefix, self.ttl = prefix, ttl
        lib = _redis()
        options = self._layout.client_options(timeout, lib.retry.Retry)
        self._client: redis.Redis = lib.Redis.from_url(url, **options)
        self._append = self._client.register_script(_APPEND)
        self._fill = self._client.register_script(_FILL)
        self._get = self._client.register_script(_GET)
        self._replayed = self._client.register_script(_REPLAYED)
        self._renew_lease = self._client.register_script(_RENEW_LEASE)
        self._drop_lease = self._client.register_script(_DROP_LEASE)
        self._closed = False

    def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        keys = self._keys(session_id)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return []
        args = self._layout.append_args(entries, idempotency_key)
        with self._layout.errors(f"append to session {session_id!r}"):
            reply = self._append(keys=keys, args=args)
        return self._layout.appended(session_id, args, reply)

    def fill(self, session_id: str, entries: Sequence[Entry]) -> bool:
        """Copy entries that already have sequence numbers (from a durable store) into the cache.

        Entries the session already holds are skipped; the rest are added at
        their own positions. Returns False, writing nothing, if they would
        leave a gap (the cached copy is missing or behind: fill from seq 1).
        """
        keys = self._keys(session_id)
        if not entries:
            return True
        args = self._layout.fill_args(entries)
        with self._layout.errors(f"fill session {session_id!r}"):
            length = self._fill(keys=keys[:2], args=args)
        return int(length) >= 0

    def load(self, session_id: str, *, after: int = 0, limit: int | None = None) -> list[Entry]:
        key = self._keys(session_id)[0]
        span = _checked_range(after, limit)
        if span is None:
            return []
        with self._layout.errors(f"load session {session_id!r}"):
            docs = self._client.lrange(key, *span)
        return [entry_from_json(doc) for doc in docs]

    def tail(self, session_id: str, n: int) -> list[Entry]:
        key = self._keys(session_id)[0]
        if _checked_count(n) == 0:
            return []
        with self._layout.errors(f"load session {session_id!r}"):
            docs = self._client.lrange(key, -n, -1)
        return [entry_from_json(doc) for doc in docs]

    def get(self, session_id: str, entry_id: str) -> Entry | None:
        keys = self._keys(session_id)
        if not isinstance(entry_id, str):
            return None
        with self._layout.errors(f"get an entry of session {session_id!r}"):
            doc = self._get(keys=keys[:2], args=[entry_id])
        return None if doc is None else entry_from_json(doc)

    def delete(self, session_id: str) -> bool:
        keys = self._keys(session_id)
        with self._layout.errors(f"delete session {session_id!r}"):
            return int(self._client.delete(*keys)) > 0

    def sessions(self, *, prefix: str | None = None) -> list[str]:
        self._layout.check_open(self._closed)
        match = self._layout.match(prefix)
        with self._layout.errors("list sessions"):
            keys = list(self._client.scan_iter(match=match, count=1000))
        return sorted({self._layout.session_of(key) for key in keys})

    def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        self._layout.check_open(self._closed)
        keys, args = self._layout.replay_args(session_id, idempotency_key)
        with self._layout.errors(f"replay a key of session {session_id!r}"):
            docs = self._replayed(keys=keys, args=args)
        return None if docs is None else [entry_from_json(doc) for doc in docs]

    def health(self) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            self._layout.check_open(self._closed)
            with self._layout.errors("health check"):
                persistence = self._client.info("persistence")
        except StoreError as exc:
            return self._layout.health(started, exc)
        return self._layout.health(started, persistence)

    def close(self) -> None:
        self._closed = True
        self._client.close()

    @contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """A lease on the session, renewed by a daemon thread until the block ends."""
        self._layout.check_open(self._closed)
        key, token = self._layout.lease_key(session_id), secrets.token_hex(16)
        poll(lambda: self._take_lease(key, token, session_id), deadline, session_id)
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._keep_lease,
            args=(key, token, session_id, stop),
            name="ctxwindow-redis-lease",
            daemon=True,
        )
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()
            self._release_lease(key, token, session_id)

    def _take_lease(self, key: str, token: str, session_id: str) -> bool:
        with self._layout.errors(f"lock session {session_id!r}"):
            return bool(self._client.set(key, token, nx=True, px=self._layout.lock_ttl_ms))

    def _keep_lease(self, key: str, token: str, session_id: str, stop: threading.Event) -> None:
        """Renew every ``lock_ttl / 3`` until ``stop``; give up once the lease is lost."""
        while not stop.wait(self._layout.lock_ttl / 3):
            try:
                with self._layout.errors(f"renew the lock of session {session_id!r}"):
                    renewed = self._renew_lease(keys=[key], args=[token, self._layout.lock_ttl_ms])
            except StoreError as exc:
                self._layout.renewal_failed(session_id, exc)
                continue
            if not self._layout.still_leased(session_id, renewed):
                return

    def _release_lease(self, key: str, token: str, session_id: str) -> None:
        """Delete the lease if it is still ours; a failure is logged (the lease expires)."""
        try:
            with self._layout.errors(f"unlock session {session_id!r}"):
                self._drop_lease(keys=[key], args=[token])
        except StoreError as exc:
            self._layout.release_failed(session_id, exc)

    def _keys(self, session_id: str) -> list[str]:
        self._layout.check_open(self._closed)
        return self._layout.keys(session_id)


class AsyncRedisStore(AsyncStore):
    """``RedisStore`` for asyncio (``redis.asyncio``)."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ctxwindow",
        ttl: float | None = None,
        timeout: float = 5.0,
        lock_ttl: float = 30.0,
    ) -> None:
        self._layout = _Layout(url, prefix, ttl, lock_ttl)
        self.url = self._layout.url
        self.prefix, self.ttl = prefix, ttl
        lib = _redis()
        options = self._layout.client_options(timeout, lib.asyncio.retry.Retry)
        self._client: redis.asyncio.Redis = lib.asyncio.Redis.from_url(url, **options)
        self._append = self._client.register_script(_APPEND)
        self._fill = self._client.register_script(_FILL)
        self._get = self._client.register_script(_GET)
        self._replayed = self._client.register_script(_REPLAYED)
        self._renew_lease = self._client.register_script(_RENEW_LEASE)
        self._drop_lease = self._client.register_script(_DROP_LEASE)
        self._closed = False

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        keys = self._keys(session_id)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return []
        args = self._layout.append_args(entries, idempotency_key)
        with self._layout.errors(f"append to session {session_id!r}"):
            reply = await self._append(keys=keys, args=args)
        return self._layout.appended(session_id, args, reply)

    async def fill(self, session_id: str, entries: Sequence[Entry]) -> bool:
        """See ``RedisStore.fill``."""
        keys = self._keys(session_id)
        if not entries:
            return True
        args = self._layout.fill_args(entries)
        with self._layout.errors(f"fill session {session_id!r}"):
            length = await self._fill(keys=keys[:2], args=args)
        return int(length) >= 0

    async def load(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        key = self._keys(session_id)[0]
        span = _checked_range(after, limit)
        if span is None:
            return []
        with self._layout.errors(f"load session {session_id!r}"):
            docs = await self._client.lrange(key, *span)
        return [entry_from_json(doc) for doc in docs]

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        key = self._keys(session_id)[0]
        if _checked_count(n) == 0:
            return []
        with self._layout.errors(f"load session {session_id!r}"):
            docs = await self._client.lrange(key, -n, -1)
        return [entry_from_json(doc) for doc in docs]

    async def get(self, session_id: str, entry_id: str) -> Entry | None:
        keys = self._keys(session_id)
        if not isinstance(entry_id, str):
            return None
        with self._layout.errors(f"get an entry of session {session_id!r}"):
            doc = await self._get(keys=keys[:2], args=[entry_id])
        return None if doc is None else entry_from_json(doc)

    async def delete(self, session_id: str) -> bool:
        keys = self._keys(session_id)
        with self._layout.errors(f"delete session {session_id!r}"):
            return int(await self._client.delete(*keys)) > 0

    async def sessions(self, *, prefix: str | None = None) -> list[str]:
        self._layout.check_open(self._closed)
        match = self._layout.match(prefix)
        with self._layout.errors("list sessions"):
            keys = [key async for key in self._client.scan_iter(match=match, count=1000)]
        return sorted({self._layout.session_of(key) for key in keys})

    async def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        self._layout.check_open(self._closed)
        keys, args = self._layout.replay_args(session_id, idempotency_key)
        with self._layout.errors(f"replay a key of session {session_id!r}"):
            docs = await self._replayed(keys=keys, args=args)
        return None if docs is None else [entry_from_json(doc) for doc in docs]

    async def health(self) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            self._layout.check_open(self._closed)
            with self._layout.errors("health check"):
                persistence = await self._client.info("persistence")
        except StoreError as exc:
            return self._layout.health(started, exc)
        return self._layout.health(started, persistence)

    async def close(self) -> None:
        self._closed = True
        await self._client.aclose()

    @asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """A lease on the session, renewed by an asyncio task until the block ends."""
        self._layout.check_open(self._closed)
        key, token = self._layout.lease_key(session_id), secrets.token_hex(16)

        async def attempt() -> bool:
            return await self._take_lease(key, token, session_id)

        await async_poll(attempt, deadline, session_id)
        renewer = asyncio.create_task(self._keep_lease(key, token, session_id))
        try:
            yield
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            await self._release_lease(key, token, session_id)

    async def _take_lease(self, key: str, token: str, session_id: str) -> bool:
        with self._layout.errors(f"lock session {session_id!r}"):
            return bool(await self._client.set(key, token, nx=True, px=self._layout.lock_ttl_ms))

    async def _keep_lease(self, key: str, token: str, session_id: str) -> None:
        """Renew every ``lock_ttl / 3`` until cancelled; give up once the lease is lost."""
        while True:
            await asyncio.sleep(self._layout.lock_ttl / 3)
            try:
                with self._layout.errors(f"renew the lock of session {session_id!r}"):
                    args = [token, self._layout.lock_ttl_ms]
                    renewed = await self._renew_lease(keys=[key], args=args)
            except StoreError as exc:
                self._layout.renewal_failed(session_id, exc)
                continue
            if not self._layout.still_leased(session_id, renewed):
                return

    async def _release_lease(self, key: str, token: str, session_id: str) -> None:
        """Delete the lease if it is still ours; a failure is logged (the lease expires)."""
        try:
            with self._layout.errors(f"unlock session {session_id!r}"):
                await self._drop_lease(keys=[key], args=[token])
        except StoreError as exc:
            self._layout.release_failed(session_id, exc)

    def _keys(self, session_id: str) -> list[str]:
        self._layout.check_open(self._closed)
        return self._layout.keys(session_id)
