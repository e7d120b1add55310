"""``AsyncTieredStore``: the store's primitives over its tiers, which are stores themselves.

The base (``AsyncStore``) checks every argument first; these methods call
the public methods of the durable and warm stores and keep the hot tier of
``common``. A read goes hot → warm → durable; an append goes to the durable
store, then best effort to the warm and hot tiers. ``stores/tiered/sync.py``
is generated from this file by ``tools/unasync.py``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, runtime_checkable

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import AsyncStore, Checkpoint, Earlier
from ctxwindow.stores.tiered.common import (
    Doc,
    HotTier,
    WarmState,
    decode,
    docs_of,
    extends,
    find,
    is_current,
    load_window,
    merge,
    report,
    time_left,
    unhealthy,
)


@runtime_checkable
class AsyncFillable(Protocol):
    """A warm store that takes entries numbered by the durable store (``AsyncRedisStore``)."""

    async def fill(self, session_id: str, entries: Sequence[Entry]) -> bool: ...


class AsyncTieredStore(AsyncStore):
    """Hot in-process LRU → ``warm`` store (normally ``AsyncRedisStore(ttl=…)``) → ``durable``.

    ``hot_size`` is a number of sessions (0 turns the hot tier off). Set
    ``single_writer=True`` when this process is the only one writing its
    sessions (one process, or sticky routing): hot reads then make no round
    trip at all. ``close()`` closes both stores.
    """

    def __init__(
        self,
        durable: AsyncStore,
        warm: AsyncStore | None = None,
        hot_size: int = 1024,
        *,
        single_writer: bool = False,
        retry_after: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.durable, self.warm = durable, warm
        self.url = f"tiered:{durable.url}"
        self.single_writer = single_writer
        self._hot = HotTier(hot_size)
        self._state = WarmState(retry_after, clock)

    # -- the primitives (arguments checked by the base) -------------------------------

    async def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        epoch = self._hot.epoch
        stored = await self.durable.append(session_id, entries, idempotency_key=idempotency_key)
        return await self._appended(session_id, stored, epoch)

    async def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        """The durable store's ``append_after`` (the session's newest entry is its)."""
        epoch = self._hot.epoch
        key = idempotency_key
        stored = await self.durable.append_after(session_id, last, entries, idempotency_key=key)
        return None if stored is None else await self._appended(session_id, stored, epoch)

    async def _appended(self, session_id: str, stored: list[Entry], epoch: int) -> list[Entry]:
        """``stored``, which the durable store appended, kept in the hot and warm tiers too."""
        if stored:
            self._hot.appended(session_id, stored, epoch)
            await self._update_warm(session_id, stored)
        return stored

    async def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        return load_window(await self._session(session_id), after, limit)

    async def _tail(self, session_id: str, n: int) -> list[Entry]:
        docs = await self._session(session_id)
        return decode(docs[-n:])

    async def _get(self, session_id: str, entry_id: str) -> Entry | None:
        return find(await self._session(session_id), entry_id)

    async def _delete(self, session_id: str) -> bool:
        existed = await self.durable.delete(session_id)
        self._hot.pop(session_id)
        await self._warm_delete(session_id)
        return existed

    async def _truncate(self, session_id: str, after: int) -> list[Entry]:
        removed = await self.durable.truncate(session_id, after)
        if removed:
            self._hot.truncated(session_id)
            async with self._warm_tier(written=session_id) as warm:
                if warm is not None:
                    await warm.truncate(session_id, after)
        return removed

    async def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        return await self.durable.sessions(prefix=prefix, after=after, limit=limit)

    async def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return await self.durable.replayed(session_id, idempotency_key)

    # Checkpoints live in the durable store only: a cold load reads it there once.

    async def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        await self.durable.save_checkpoint(session_id, seq, data)
        return None

    async def _checkpoint(self, session_id: str) -> Checkpoint | None:
        return await self.durable.checkpoint(session_id)

    async def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        return await self.durable.load_from_checkpoint(session_id, limit=limit)

    async def _earlier(self, session_id: str, before: int) -> Earlier:
        return await self.durable.earlier(session_id, before)

    async def _health(self) -> dict[str, Any]:
        try:
            health = report(await self.durable.health(), self._hot)
        except StoreError as exc:
            health = report(unhealthy(self.durable.url, exc), self._hot)
        if self.warm is not None:
            health["warm"] = await self._probe_warm(self.warm)
            health["degraded"] = self._state.error is not None
        return health

    @asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """The durable store's lock on the session, within what is left of the timeout."""
        async with self.durable.lock(session_id, timeout=time_left(deadline)):
            yield

    async def _close(self) -> None:
        try:
            if self.warm is not None:
                await self.warm.close()
        finally:
            await self.durable.close()

    # -- reads and writes across the tiers ----------------------------------------------

    async def _session(self, session_id: str) -> list[Doc]:
        """The whole session, from the highest tier that has it current."""
        epoch, cached = self._hot.epoch, self._hot.get(session_id)
        if cached is not None and self.single_writer:
            return cached
        docs = await self._warm_refresh(session_id, cached)
        if docs is None:
            docs = await self._durable_docs(session_id, cached)
        stale = bool(cached) and not extends(docs, cached or [])  # truncated by another process
        self._hot.loaded(session_id, docs, epoch, replace=stale)
        return docs

    async def _durable_docs(self, session_id: str, cached: list[Doc] | None) -> list[Doc]:
        """The session from the durable store, copied into the warm tier."""
        docs = await _refresh(self.durable, session_id, cached)
        if docs is None:
            docs = docs_of(await self.durable.load(session_id)) if cached else []
        if docs:
            await self._warm_fill(session_id, decode(docs))
        return docs

    async def _update_warm(self, session_id: str, stored: list[Entry]) -> None:
        if await self._warm_fill(session_id, stored) is not False:
            return
        try:  # the warm copy is missing or behind: refill it from the durable store
            entries = await self.durable.load(session_id)
        except StoreError:
            await self._warm_delete(session_id)
        else:
            await self._warm_fill(session_id, entries)

    # -- the warm tier: bypassed while it fails ----------------------------------------

    async def _warm_refresh(self, session_id: str, cached: list[Doc] | None) -> list[Doc] | None:
        async with self._warm_tier() as warm:
            if warm is not None:
                return await _refresh(warm, session_id, cached)
        return None

    async def _warm_fill(self, session_id: str, entries: Sequence[Entry]) -> bool | None:
        """Whether the entries were copied (False: they would leave a gap); None: no warm tier."""
        async with self._warm_tier(written=session_id) as warm:
            if warm is not None:
                return await _fill(warm, session_id, entries)
        return None

    async def _warm_delete(self, session_id: str) -> None:
        async with self._warm_tier(written=session_id) as warm:
            if warm is not None:
                await warm.delete(session_id)

    @asynccontextmanager
    async def _warm_tier(self, written: str | None = None) -> AsyncIterator[AsyncStore | None]:
        """The warm store for one block of work, or None when none is in use.

        A ``StoreError`` in the block is recorded (the warm store is bypassed
        for ``retry_after`` seconds), not raised. ``written`` is the session
        the block writes: if the warm store misses the write, that session is
        dropped from it once it is back.
        """
        warm = await self._usable_warm(written)
        if warm is None:
            yield None
            return
        try:
            yield warm
        except StoreError as exc:
            self._state.failed(exc, written, warm.url, self.durable.url)
        else:
            self._state.recovered(warm.url)

    async def _usable_warm(self, written: str | None) -> AsyncStore | None:
        """The warm store, with what it missed dropped first; None if there is none in use."""
        if self.warm is None:
            return None
        if not self._state.usable():
            self._state.bypassed(written)
            return None
        try:
            await self._drop_stale(self.warm)
        except StoreError as exc:
            self._state.failed(exc, written, self.warm.url, self.durable.url)
            return None
        return self.warm

    async def _drop_stale(self, warm: AsyncStore) -> None:
        for session_id in list(self._state.stale):
            await warm.delete(session_id)
            self._state.stale.discard(session_id)

    async def _probe_warm(self, warm: AsyncStore) -> dict[str, Any]:
        """The warm store's health; a healthy one is taken back into use."""
        try:
            health = await warm.health()
            if not health.get("ok"):
                raise StoreUnavailableError(str(health.get("error", "not healthy")))
            await self._drop_stale(warm)
        except StoreError as exc:
            self._state.failed(exc, None, warm.url, self.durable.url)
            return unhealthy(warm.url, exc)
        self._state.recovered(warm.url)
        return health


async def _refresh(
    store: AsyncStore, session_id: str, cached: list[Doc] | None
) -> list[Doc] | None:
    """The session from ``store``, reusing ``cached`` while current; None if ``store`` lacks it."""
    if not cached:
        return docs_of(await store.load(session_id)) or None
    last = await store.tail(session_id, 1)
    if is_current(cached, last):
        return cached
    if not last or last[0].seq <= cached[-1].seq:
        return None  # behind the cache (a stale warm copy), or truncated or deleted
    # Read from the cache's newest entry: if it is not there any more, the session was
    # truncated (or deleted) and written anew past the cache, which is then no prefix of it.
    newer = await store.load(session_id, after=cached[-1].seq - 1)
    if not newer or newer[0].seq != cached[-1].seq or newer[0].id != cached[-1].id:
        return None
    return merge(cached, docs_of(newer))


async def _fill(warm: AsyncStore, session_id: str, entries: Sequence[Entry]) -> bool:
    """Copy durable entries into the warm store; False if they would leave a gap."""
    if isinstance(warm, AsyncFillable):
        return await warm.fill(session_id, entries)
    last = await warm.tail(session_id, 1)
    end = last[0].seq if last else 0
    if entries[0].seq > end + 1:
        return False
    missing = [entry for entry in entries if entry.seq > end]
    got = await warm.append(session_id, missing) if missing else []
    if [entry.seq for entry in got] != [entry.seq for entry in missing]:
        await warm.delete(session_id)  # another writer raced this one: the next read refills
    return True
