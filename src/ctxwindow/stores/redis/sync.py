# Generated from src/ctxwindow/stores/redis/aio.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py`.
"""``RedisStore``: the store's primitives as Redis commands and Lua scripts.

The base (``Store``) checks every argument first; these methods only talk
to the server, through the keys and scripts of ``common``, and hold the
session lease. ``stores/redis/sync.py`` is generated from this file by
``tools/unasync.py``.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ctxwindow.concurrency.sync import Background, poll, repeating
from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    Checkpoint,
    Earlier,
    Store,
    check_entries,
    check_session_id,
    entry_from_json,
    page_start,
)
from ctxwindow.stores.redis.common import (
    EARLIER_PAGE,
    NOT_INDEXED,
    NOT_NEWEST,
    REDIRECTIONS,
    RELEASE_RETRY,
    Layout,
    Orphans,
    Scripts,
    earlier_page,
    load_redis,
    make_client,
    merged_page,
)

if TYPE_CHECKING:
    import redis


class RedisStore(Store):
    """Sessions in Redis; ``ttl`` (seconds) makes it a cache whose sessions expire when idle.

    ``url`` names one server (``redis://``, ``rediss://``, ``unix://``) or a
    Redis Cluster (``redis+cluster://host:port,host:port``); with
    ``?wait_replicas=N`` an append returns only once N replicas have it.
    ``lock_ttl`` is the lease of a session lock, in seconds: how long a holder
    that died keeps the session locked (see ``ctxwindow.stores.redis``).
    ``timeout`` bounds every call (connecting, then each command), in seconds.

    ``read_only=True``: writes are refused and reads write nothing (the index
    of session ids is neither built nor tidied: without one, a list scans).

    Example: ``RedisStore("redis://127.0.0.1:6379/0", ttl=3600)``.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ctxwindow",
        ttl: float | None = None,
        timeout: float = 5.0,
        lock_ttl: float = 5.0,
        read_only: bool = False,
    ) -> None:
        self._layout = Layout(url, prefix, ttl, lock_ttl)
        self.url = self._layout.url
        self.prefix, self.ttl, self.read_only = prefix, ttl, read_only
        lib = load_redis()
        target = self._layout.target
        self._options = self._layout.client_options(timeout, lib.retry.Retry)
        with self._layout.errors("connect"):  # a sync cluster client reads the map now
            self._client: Any = make_client(lib, target, self._options)
        self._scripts = Scripts(self._client)
        # With wait_replicas on a cluster: a client of each primary, so that a write and
        # its WAIT go on one connection (see ``_written``); refreshed after a failure.
        self._primaries: dict[str, redis.Redis] = {}
        self._stale = False
        self._orphans = Orphans(self._layout.url)
        self._releaser = Background(self._release_orphans, RELEASE_RETRY, "ctxwindow-redis-release")
        self._leased: dict[str, tuple[str, str]] = {}  # key -> (token, session): held now

    def fill(self, session_id: str, entries: Sequence[Entry]) -> bool:
        """Copy entries that already have sequence numbers (from a durable store) into the cache.

        Entries the session already holds are skipped; the rest are added at
        their own positions. Returns False, writing nothing, if they would
        leave a gap (the cached copy is missing or behind: fill from seq 1),
        or, dropping the cached copy, if it holds another entry at one of their
        seqs (it is of entries since removed: truncated or deleted).
        """
        self._check_writable("fill")
        check_session_id(session_id)
        check_entries(entries)
        if not entries:
            return True
        keys = self._layout.indexed_keys(session_id)
        args = self._layout.fill_args(session_id, entries)
        with self._layout.errors(f"fill session {session_id!r}"):
            length = int(self._scripts.fill(keys=keys, args=args))
            if length == -NOT_INDEXED:
                self._index(session_id)
                args = self._layout.may_create(args)
                length = int(self._scripts.fill(keys=keys, args=args))
                if length > 0:
                    self._created(session_id)
            elif length == -3 and self._layout.cluster:  # dropped a stale copy
                self._unindex(session_id)
        return length >= 0

    # -- the primitives (arguments checked by the base) -------------------------------

    def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        args, reply = self._appending(session_id, entries, idempotency_key, None)
        return self._layout.appended(session_id, args, reply)

    def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        """One ``APPEND``, which checks the newest entry before it writes anything."""
        args, reply = self._appending(session_id, entries, idempotency_key, last)
        if int(reply[0]) == NOT_NEWEST:
            return None
        return self._layout.appended(session_id, args, reply)

    def _appending(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str] | None,
    ) -> tuple[list[Any], Any]:
        """``APPEND`` (on a cluster, a new session indexed first): its arguments as last sent,
        and its reply. With ``last``, only after that newest entry; None: a plain append."""
        keys = self._layout.indexed_keys(session_id)
        args = self._layout.append_args(session_id, entries, idempotency_key, last)
        with self._layout.errors(f"append to session {session_id!r}"):
            reply = self._written(keys, args)
            if int(reply[0]) == NOT_INDEXED:  # a new session, on a cluster: indexed first
                self._index(session_id)
                args = self._layout.may_create(args)
                reply = self._written(keys, args)  # ``last`` is checked again
                if int(reply[0]) == 1 and int(reply[1]) == 1:
                    self._created(session_id)
        return args, reply

    def _written(self, keys: list[str], args: list[Any]) -> Any:
        """The reply of ``APPEND``; with ``wait_replicas``, once that many replicas have it.

        The script and ``WAIT`` go in one pipeline, on one connection to the
        session's primary (``WAIT`` counts the writes of its own connection).
        A primary that moved the slot away answers MOVED before running
        anything: the cluster's map is read again and the write sent there.
        """
        wanted = self._layout.target.wait_replicas
        if wanted == 0:
            return self._scripts.append(keys=keys, args=args)
        errors = load_redis().exceptions
        for _ in range(REDIRECTIONS):
            pipe = (self._primary_of(keys[0])).pipeline(transaction=False)
            self._scripts.append(keys=keys, args=args, client=pipe)
            pipe.wait(wanted, self._layout.wait_ms)
            try:
                reply, acknowledged = pipe.execute()
            except errors.AskError:  # MovedError too
                self._stale = True
                continue
            except (errors.ConnectionError, errors.TimeoutError):
                self._stale = True
                raise
            if int(reply[0]) not in (NOT_INDEXED, NOT_NEWEST):  # else nothing was written
                self._layout.check_replicas(int(acknowledged), wanted)
            return reply
        raise errors.TryAgainError(f"the slot of {keys[0]!r} kept moving")

    def _primary_of(self, key: str) -> Any:
        """The client of the primary that holds ``key`` (the store's own on one server)."""
        if not self._layout.cluster:
            return self._client
        if self._stale:
            self._stale = False
            self._client.nodes_manager.initialize()
        node = self._client.get_node_from_key(key)
        client = self._primaries.get(node.name)
        if client is None:
            lib = load_redis()
            options = {**self._layout.target.options, **self._options}
            client = lib.Redis(host=node.host, port=node.port, **options)
            self._primaries[node.name] = client
        return client

    # -- a cluster's index of session ids: kept beside the scripts ---------------------

    def _index(self, session_id: str) -> None:
        self._client.zadd(self._layout.shard_key(session_id), {session_id: 0})

    def _created(self, session_id: str) -> None:
        """After a write that created a session: index it again (a delete's ``_unindex``
        may have just taken it out) and, with a ttl, drop dead ids near it."""
        self._index(session_id)
        if self.ttl is None:
            return
        shard = self._layout.shard_key(session_id)
        for member in self._client.zrandmember(shard, 3) or []:
            other = member.decode("utf-8")
            if not self._client.exists(self._layout.entries_key(other)):
                self._unindex(other)

    def _unindex(self, session_id: str) -> None:
        """Take a session that was removed out of the index, and put it back if it was
        written again meanwhile (an append indexes it before it writes, and again after)."""
        shard = self._layout.shard_key(session_id)
        self._client.zrem(shard, session_id)
        if self._client.exists(self._layout.entries_key(session_id)):
            self._index(session_id)

    def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        stop = -1 if limit is None else after + limit - 1  # LRANGE's stop is inclusive
        return self._range(session_id, after, stop)

    def _tail(self, session_id: str, n: int) -> list[Entry]:
        return self._range(session_id, -n, -1)

    def _range(self, session_id: str, start: int, stop: int) -> list[Entry]:
        with self._layout.errors(f"load session {session_id!r}"):
            docs = self._client.lrange(self._layout.entries_key(session_id), start, stop)
        return [entry_from_json(doc) for doc in docs]

    def _get(self, session_id: str, entry_id: str) -> Entry | None:
        keys = self._layout.keys(session_id)[:2]
        with self._layout.errors(f"get an entry of session {session_id!r}"):
            doc = self._scripts.get(keys=keys, args=[entry_id])
        return None if doc is None else entry_from_json(doc)

    def _delete(self, session_id: str) -> bool:
        keys = self._layout.indexed_keys(session_id)
        with self._layout.errors(f"delete session {session_id!r}"):
            had = int(self._scripts.delete(keys=keys, args=[session_id]))
            if self._layout.cluster:
                self._unindex(session_id)
        return had > 0

    def _truncate(self, session_id: str, after: int) -> list[Entry]:
        keys = self._layout.indexed_keys(session_id)
        args = [self._layout.ttl_ms, after, session_id]
        with self._layout.errors(f"truncate session {session_id!r}"):
            docs = self._scripts.truncate(keys=keys, args=args)
            if docs and after == 0 and self._layout.cluster:
                self._unindex(session_id)
        return [entry_from_json(doc) for doc in docs]

    def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        if self._layout.cluster:
            return self._sharded(prefix, after, limit)
        keys = [self._layout.index_key, self._layout.indexed_marker]
        args = self._layout.page_args(prefix, after, limit, tidy=not self.read_only)
        with self._layout.errors("list sessions"):
            page = self._scripts.sessions(keys=keys, args=args)
            if page is None and self.read_only:  # no index, and none may be built
                return self._scanned(prefix, after, limit)
            if page is None:  # sessions stored before the index: indexed once, then paged
                self._build_index()
                page = self._scripts.sessions(keys=keys, args=args)
        return [session_id.decode("utf-8") for session_id in page]

    def _sharded(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        """A page of a cluster's sessions: the first ``limit`` ids of every shard, merged and
        cut, without those whose entries are gone (dropped from the index on the way)."""
        low, high = self._layout.bounds(prefix, after)
        page: list[str] = []
        with self._layout.errors("list sessions"):
            while limit is None or len(page) < limit:
                want = None if limit is None else limit - len(page)
                pipe = self._client.pipeline(transaction=False)
                for shard in self._layout.shard_keys:
                    pipe.zrangebylex(shard, low, high, None if want is None else 0, want)
                batch = merged_page(pipe.execute(), want)
                if not batch:
                    break
                pipe = self._client.pipeline(transaction=False)
                for session_id in batch:
                    pipe.exists(self._layout.entries_key(session_id))
                for session_id, alive in zip(batch, pipe.execute(), strict=True):
                    if alive:
                        page.append(session_id)
                    elif not self.read_only:
                        self._unindex(session_id)
                low = b"(" + batch[-1].encode()
        return page

    def _scanned(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        """A page of sessions found by ``SCAN`` (all of them read, then sorted): the list of
        a store opened read-only that has no index."""
        start, inclusive = page_start(prefix, after)
        found = set()
        for key in self._client.scan_iter(match=self._layout.match(prefix), count=1000):
            session_id = self._layout.session_of(key)
            if session_id > start or (inclusive and session_id == start):
                found.add(session_id)
        return sorted(found)[:limit]

    def _build_index(self) -> None:
        """Put every session in the index (a ``SCAN``), then mark it built.

        Appends add their own sessions meanwhile; a session deleted meanwhile
        may be put back, and the next page that meets it drops it again.
        """
        batch: dict[str, int] = {}
        for key in self._client.scan_iter(match=self._layout.match(""), count=1000):
            batch[self._layout.session_of(key)] = 0
            if len(batch) == 1000:
                self._client.zadd(self._layout.index_key, batch)
                batch = {}
        if batch:
            self._client.zadd(self._layout.index_key, batch)
        self._client.set(self._layout.indexed_marker, 1)

    def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        entries, _, keys, _ = self._layout.keys(session_id)
        with self._layout.errors(f"replay a key of session {session_id!r}"):
            docs = self._scripts.replayed(keys=[entries, keys], args=[idempotency_key])
        return None if docs is None else [entry_from_json(doc) for doc in docs]

    def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        keys, args = self._layout.keys(session_id), [self._layout.ttl_ms, seq, data]
        with self._layout.errors(f"save the checkpoint of session {session_id!r}"):
            last = int(self._scripts.save_checkpoint(keys=keys, args=args))
        return None if last < 0 else last  # -1: saved, or kept a later one

    def _checkpoint(self, session_id: str) -> Checkpoint | None:
        keys = self._layout.checkpoint_keys(session_id)
        with self._layout.errors(f"read the checkpoint of session {session_id!r}"):
            reply = self._scripts.checkpoint(keys=keys)
        return self._layout.checkpoint_of(reply)

    def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        keys = self._layout.checkpoint_keys(session_id)
        args = [-1 if limit is None else limit]
        with self._layout.errors(f"load session {session_id!r}"):
            reply = self._scripts.load_from_checkpoint(keys=keys, args=args)
        return self._layout.checkpoint_of(reply), [entry_from_json(doc) for doc in reply[2:]]

    def _earlier(self, session_id: str, before: int) -> Earlier:
        """Page by page (each a script call), so that Redis is never held long."""
        found, start, key = Earlier([], 0, 0), 0, self._layout.entries_key(session_id)
        while start < before - 1:
            stop = min(start + EARLIER_PAGE, before - 1) - 1  # list indexes, inclusive
            with self._layout.errors(f"load session {session_id!r}"):
                reply = self._scripts.earlier(keys=[key], args=[start, stop])
            found = earlier_page(found, reply)
            start = stop + 1
        return found

    def _health(self) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            with self._layout.errors("health check"):
                persistence = self._client.info("persistence")
                if self._layout.cluster:
                    persistence = self._layout.cluster_health(
                        persistence, self._client.cluster_info()
                    )
        except StoreError as exc:
            return self._layout.health(started, exc)
        return self._layout.health(started, persistence)

    def _close(self) -> None:
        """Stop retrying releases, give up the leases still held (their blocks, ending
        later, then send nothing), and close the connections."""
        self._releaser.stop()
        for key, (token, session_id) in list(self._leased.items()):
            with contextlib.suppress(StoreError):  # else the lease expires by its ttl
                self._drop_lease(key, token, session_id)
        self._layout.closed = True
        for client in self._primaries.values():
            client.close()
        self._client.close()

    # -- the lock across processes: a lease renewed while the block runs --------------

    @contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """A lease on the session, renewed every ``lock_ttl / 3`` until the block ends."""
        key, token = self._layout.lease_key(session_id), secrets.token_hex(16)
        try:
            poll(functools.partial(self._take_lease, key, token, session_id), deadline, session_id)
        except StoreError:
            # A SET the client gave up on may still reach a stalled server later: the
            # lease would then lock the session for ``lock_ttl`` after the server returns.
            if not self._layout.closed:
                self._orphans.add(key, token, session_id)
                self._releaser.start()
            raise
        self._leased[key] = (token, session_id)
        try:
            renew = functools.partial(self._renew_lease, key, token, session_id)
            with repeating(renew, self._layout.lock_ttl / 3, "ctxwindow-redis-lease"):
                yield
        finally:
            del self._leased[key]
            self._release_lease(key, token, session_id)

    def _take_lease(self, key: str, token: str, session_id: str) -> bool:
        with self._layout.errors(f"lock session {session_id!r}"):
            return bool(self._client.set(key, token, nx=True, px=self._layout.lock_ttl_ms))

    def _renew_lease(self, key: str, token: str, session_id: str) -> bool:
        """Extend the lease; False once it is lost (a failure to reach the server is retried)
        or the store is closed (which gave it up)."""
        if self._layout.closed:
            return False
        try:
            with self._layout.errors(f"renew the lock of session {session_id!r}"):
                args = [token, self._layout.lock_ttl_ms]
                renewed = self._scripts.renew_lease(keys=[key], args=args)
        except StoreError as exc:
            self._layout.renewal_failed(session_id, exc)
            return True
        return self._layout.still_leased(session_id, renewed)

    def _release_lease(self, key: str, token: str, session_id: str) -> None:
        """Delete the lease if it is still ours; one the server did not take is retried.
        Once the store is closed there is nothing to do: closing gave the lease up."""
        if self._layout.closed:
            return
        try:
            self._drop_lease(key, token, session_id)
        except StoreError as exc:
            self._layout.release_failed(session_id, exc)
            self._orphans.add(key, token, session_id)
            self._releaser.start()

    def _drop_lease(self, key: str, token: str, session_id: str) -> None:
        with self._layout.errors(f"unlock session {session_id!r}"):
            self._scripts.drop_lease(keys=[key], args=[token])

    def _release_orphans(self) -> None:
        """Retry the failed releases, in the background, until the server takes them."""
        for key, token, session_id in self._orphans.pending():
            try:
                self._drop_lease(key, token, session_id)
            except StoreError:
                return  # still unreachable: the next round tries again
            self._orphans.released(key, token, session_id)
