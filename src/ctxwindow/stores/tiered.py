"""Tiered session stores: a hot in-process LRU, a warm cache, a durable store.

Example::

    store = TieredStore(PostgresStore(postgres_url), warm=RedisStore(redis_url, ttl=3600))

- The durable store (SQLite, PostgreSQL) is the source of truth and numbers
  the entries. An append goes there first, so an acknowledged append is as
  durable as that store makes it; the warm and hot tiers are then updated
  best effort: their failures never fail an append the durable store took.
- A read is answered by the hot tier, else the warm one, else the durable
  store (which then fills the other two). Unless ``single_writer=True``, a
  hot answer is first checked against the newest entry of the next tier (one
  small round trip), so sessions that other processes write are not served
  stale from this process's memory.
- The warm copy of a session is always a prefix of the durable one: entries
  are copied with the durable sequence numbers (``RedisStore.fill``), and a
  copy found missing or behind is refilled from the durable store.
- A warm store that fails (``StoreError``; typically Redis down) is bypassed:
  one warning is logged, reads and writes go to the durable store,
  ``health()`` reports ``"degraded": True``, and the warm store is tried again
  after ``retry_after`` seconds. Sessions this process wrote meanwhile are
  dropped from the warm store when it is back, so it never serves what it
  missed; writes of other processes during the outage are bounded by the
  warm store's TTL.
- ``replayed`` and ``lock`` are the durable store's: it is the source of
  truth, so a session held through a ``TieredStore`` is held against every
  user of that durable store, in this process and in others.
- The hot tier keeps each entry as its JSON text and decodes a fresh copy for
  every reader, so no caller can change what it holds.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    AsyncStore,
    Store,
    check_count,
    check_session_id,
    entry_from_json,
    entry_to_json,
)

logger = logging.getLogger("ctxwindow.stores")

T = TypeVar("T")


@runtime_checkable
class Fillable(Protocol):
    """A warm store that takes entries numbered by the durable store (``RedisStore``)."""

    def fill(self, session_id: str, entries: Sequence[Entry]) -> bool: ...


@runtime_checkable
class AsyncFillable(Protocol):
    """``Fillable`` for asyncio (``AsyncRedisStore``)."""

    async def fill(self, session_id: str, entries: Sequence[Entry]) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Doc:
    """An entry as the hot tier keeps it: its JSON text, decoded afresh for each reader."""

    seq: int
    id: str
    text: str


@dataclass(frozen=True)
class _Floor:
    """A hot-tier mark: the session reaches ``seq`` but is not cached whole."""

    seq: int


def _docs(entries: Iterable[Entry]) -> list[_Doc]:
    return [_Doc(entry.seq, entry.id, entry_to_json(entry)) for entry in entries]


def _decode(docs: Iterable[_Doc]) -> list[Entry]:
    return [entry_from_json(doc.text) for doc in docs]


def merge(current: Sequence[_Doc], new: Sequence[_Doc]) -> list[_Doc] | None:
    """``current`` followed by the entries of ``new`` past its end; None if there is a gap."""
    end = current[-1].seq if current else 0
    if new and new[0].seq > end + 1:
        return None
    return [*current, *(doc for doc in new if doc.seq > end)]


def _end(known: Sequence[_Doc] | _Floor) -> int:
    if isinstance(known, _Floor):
        return known.seq
    return known[-1].seq if known else 0


class _Hot:
    """The hot tier: whole sessions in an LRU (thread-safe)."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"hot_size must be >= 0, got {size}")
        self.size = size
        self._data: OrderedDict[str, list[_Doc] | _Floor] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return sum(isinstance(value, list) for value in self._data.values())

    def get(self, session_id: str) -> list[_Doc] | None:
        with self._lock:
            value = self._data.get(session_id)
            if not isinstance(value, list):
                return None
            self._data.move_to_end(session_id)
            return value

    def loaded(self, session_id: str, docs: list[_Doc]) -> None:
        """Cache a session read from a lower tier, unless an append overtook the read."""
        with self._lock:
            known = self._data.get(session_id)
            if known is None or _end(known) <= _end(docs):
                self._set(session_id, docs)

    def appended(self, session_id: str, stored: Sequence[Entry]) -> None:
        """Extend a cached session; mark one that is not cached, so a slower read can't win."""
        if not self.size:
            return
        new = _docs(stored)
        with self._lock:
            known = self._data.get(session_id)
            if new[0].seq == 1:
                merged: list[_Doc] | None = new
            elif isinstance(known, list):
                merged = merge(known, new)
            else:
                merged = None
            self._set(session_id, _Floor(new[-1].seq) if merged is None else merged)

    def pop(self, session_id: str) -> None:
        with self._lock:
            self._data.pop(session_id, None)

    def _set(self, session_id: str, value: list[_Doc] | _Floor) -> None:
        self._data[session_id] = value
        self._data.move_to_end(session_id)
        while len(self._data) > self.size:
            self._data.popitem(last=False)


class _WarmState:
    """Whether the warm store is in use, and what it missed while it was not."""

    def __init__(self, retry_after: float, clock: Callable[[], float]) -> None:
        self.retry_after = retry_after
        self.clock = clock
        self.error: str | None = None
        self.retry_at = 0.0
        self.stale: set[str] = set()  # sessions written while the warm store was bypassed

    def usable(self) -> bool:
        return self.error is None or self.clock() >= self.retry_at

    def bypassed(self, session_id: str | None) -> None:
        if session_id is not None:
            self.stale.add(session_id)

    def failed(self, exc: StoreError, session_id: str | None, warm: str, durable: str) -> None:
        self.bypassed(session_id)
        if self.error is None:
            logger.warning(
                "the warm store %s failed; serving from %s until it is back: %s",
                warm,
                durable,
                exc,
            )
        self.error = f"{type(exc).__name__}: {exc}"
        self.retry_at = self.clock() + self.retry_after

    def recovered(self, warm: str) -> None:
        if self.error is not None:
            logger.warning("the warm store %s is back", warm)
            self.error = None


def _load_window(docs: list[_Doc], after: int, limit: int | None) -> list[Entry]:
    start = bisect_right(docs, after, key=lambda doc: doc.seq)
    return _decode(docs[start : None if limit is None else start + limit])


def _find(docs: list[_Doc], entry_id: object) -> Entry | None:
    return next((entry_from_json(d.text) for d in reversed(docs) if d.id == entry_id), None)


def _current(cached: list[_Doc], last: list[Entry]) -> bool:
    return bool(last) and last[0].seq == cached[-1].seq and last[0].id == cached[-1].id


def _report(durable: dict[str, Any], hot: _Hot) -> dict[str, Any]:
    return {
        "ok": bool(durable.get("ok")),
        "store": "tiered",
        "durable": bool(durable.get("durable")),
        "degraded": False,
        "hot": {"sessions": len(hot), "max_sessions": hot.size},
        "durable_tier": durable,
    }


def _unhealthy(store: Store | AsyncStore, exc: StoreError) -> dict[str, Any]:
    return {"ok": False, "url": store.url, "error": str(exc)}


def _time_left(deadline: float | None) -> float | None:
    """A ``lock`` timeout that ends at ``deadline`` (a ``time.monotonic()`` value)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class TieredStore(Store):
    """Hot in-process LRU → ``warm`` store (normally ``RedisStore(ttl=…)``) → ``durable`` store.

    ``hot_size`` is a number of sessions (0 turns the hot tier off). Set
    ``single_writer=True`` when this process is the only one writing its
    sessions (one process, or sticky routing): hot reads then make no round
    trip at all. ``close()`` closes both stores.
    """

    def __init__(
        self,
        durable: Store,
        warm: Store | None = None,
        hot_size: int = 1024,
        *,
        single_writer: bool = False,
        retry_after: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.durable, self.warm = durable, warm
        self.url = f"tiered:{durable.url}"
        self.single_writer = single_writer
        self._hot = _Hot(hot_size)
        self._state = _WarmState(retry_after, clock)

    def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        stored = self.durable.append(session_id, entries, idempotency_key=idempotency_key)
        if stored:
            self._hot.appended(session_id, stored)
            self._update_warm(session_id, stored)
        return stored

    def load(self, session_id: str, *, after: int = 0, limit: int | None = None) -> list[Entry]:
        check_session_id(session_id)
        check_count("after", after)
        check_count("limit", limit)
        return _load_window(self._session(session_id), after, limit)

    def tail(self, session_id: str, n: int) -> list[Entry]:
        check_session_id(session_id)
        check_count("n", n)
        return _decode(self._session(session_id)[-n:]) if n else []

    def get(self, session_id: str, entry_id: str) -> Entry | None:
        check_session_id(session_id)
        return _find(self._session(session_id), entry_id)

    def delete(self, session_id: str) -> bool:
        existed = self.durable.delete(session_id)
        self._hot.pop(session_id)
        self._with_warm(lambda warm: warm.delete(session_id), session_id, writes=True)
        return existed

    def sessions(self, *, prefix: str | None = None) -> list[str]:
        return self.durable.sessions(prefix=prefix)

    def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return self.durable.replayed(session_id, idempotency_key)

    def health(self) -> dict[str, Any]:
        try:
            report = _report(self.durable.health(), self._hot)
        except StoreError as exc:
            report = _report(_unhealthy(self.durable, exc), self._hot)
        if self.warm is not None:
            report["warm"] = self._probe_warm(self.warm)
            report["degraded"] = self._state.error is not None
        return report

    def close(self) -> None:
        try:
            if self.warm is not None:
                self.warm.close()
        finally:
            self.durable.close()

    @contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """The durable store's lock on the session, within what is left of the timeout."""
        with self.durable.lock(session_id, timeout=_time_left(deadline)):
            yield

    def _session(self, session_id: str) -> list[_Doc]:
        """The whole session, from the highest tier that has it current."""
        cached = self._hot.get(session_id)
        if cached is not None and self.single_writer:
            return cached
        docs = self._with_warm(lambda warm: _refresh(warm, session_id, cached), None)
        if docs is None:
            docs = _refresh(self.durable, session_id, cached)
            if docs is None:
                docs = _docs(self.durable.load(session_id)) if cached else []
            if docs:
                found = _decode(docs)
                self._with_warm(lambda warm: _fill(warm, session_id, found), session_id, True)
        self._hot.loaded(session_id, docs)
        return docs

    def _update_warm(self, session_id: str, stored: list[Entry]) -> None:
        done = self._with_warm(lambda warm: _fill(warm, session_id, stored), session_id, True)
        if done is not False:
            return
        try:  # the warm copy is missing or behind: refill it from the durable store
            entries = self.durable.load(session_id)
        except StoreError:
            self._with_warm(lambda warm: warm.delete(session_id), session_id, writes=True)
        else:
            self._with_warm(lambda warm: _fill(warm, session_id, entries), session_id, True)

    def _with_warm(
        self, op: Callable[[Store], T], session_id: str | None, writes: bool = False
    ) -> T | None:
        """``op(warm)``, or None when there is no usable warm store (a failure is recorded)."""
        written = session_id if writes else None
        if self.warm is None:
            return None
        if not self._state.usable():
            self._state.bypassed(written)
            return None
        try:
            self._drop_stale(self.warm)
            result = op(self.warm)
        except StoreError as exc:
            self._state.failed(exc, written, self.warm.url, self.durable.url)
            return None
        self._state.recovered(self.warm.url)
        return result

    def _drop_stale(self, warm: Store) -> None:
        for session_id in list(self._state.stale):
            warm.delete(session_id)
            self._state.stale.discard(session_id)

    def _probe_warm(self, warm: Store) -> dict[str, Any]:
        """The warm store's health; a healthy one is taken back into use."""
        try:
            report = warm.health()
            if not report.get("ok"):
                raise StoreUnavailableError(str(report.get("error", "not healthy")))
            self._drop_stale(warm)
        except StoreError as exc:
            self._state.failed(exc, None, warm.url, self.durable.url)
            return _unhealthy(warm, exc)
        self._state.recovered(warm.url)
        return report


def _refresh(store: Store, session_id: str, cached: list[_Doc] | None) -> list[_Doc] | None:
    """The session from ``store``, reusing ``cached`` while current; None if ``store`` lacks it."""
    if not cached:
        return _docs(store.load(session_id)) or None
    last = store.tail(session_id, 1)
    if _current(cached, last):
        return cached
    if not last or last[0].seq <= cached[-1].seq:
        return None  # behind the cache (a stale warm copy), or deleted and written anew
    return merge(cached, _docs(store.load(session_id, after=cached[-1].seq)))


def _fill(warm: Store, session_id: str, entries: Sequence[Entry]) -> bool:
    """Copy durable entries into the warm store; False if they would leave a gap."""
    if isinstance(warm, Fillable):
        return warm.fill(session_id, entries)
    last = warm.tail(session_id, 1)
    end = last[0].seq if last else 0
    if entries[0].seq > end + 1:
        return False
    missing = [entry for entry in entries if entry.seq > end]
    got = warm.append(session_id, missing) if missing else []
    if [entry.seq for entry in got] != [entry.seq for entry in missing]:
        warm.delete(session_id)  # another writer raced this one: the next read refills
    return True


class AsyncTieredStore(AsyncStore):
    """``TieredStore`` for asyncio: async durable and warm stores (``AsyncRedisStore`` …)."""

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
        self._hot = _Hot(hot_size)
        self._state = _WarmState(retry_after, clock)

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        stored = await self.durable.append(session_id, entries, idempotency_key=idempotency_key)
        if stored:
            self._hot.appended(session_id, stored)
            await self._update_warm(session_id, stored)
        return stored

    async def load(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        check_session_id(session_id)
        check_count("after", after)
        check_count("limit", limit)
        return _load_window(await self._session(session_id), after, limit)

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        check_session_id(session_id)
        check_count("n", n)
        return _decode((await self._session(session_id))[-n:]) if n else []

    async def get(self, session_id: str, entry_id: str) -> Entry | None:
        check_session_id(session_id)
        return _find(await self._session(session_id), entry_id)

    async def delete(self, session_id: str) -> bool:
        existed = await self.durable.delete(session_id)
        self._hot.pop(session_id)
        await self._with_warm(lambda warm: warm.delete(session_id), session_id, writes=True)
        return existed

    async def sessions(self, *, prefix: str | None = None) -> list[str]:
        return await self.durable.sessions(prefix=prefix)

    async def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return await self.durable.replayed(session_id, idempotency_key)

    async def health(self) -> dict[str, Any]:
        try:
            report = _report(await self.durable.health(), self._hot)
        except StoreError as exc:
            report = _report(_unhealthy(self.durable, exc), self._hot)
        if self.warm is not None:
            report["warm"] = await self._probe_warm(self.warm)
            report["degraded"] = self._state.error is not None
        return report

    async def close(self) -> None:
        try:
            if self.warm is not None:
                await self.warm.close()
        finally:
            await self.durable.close()

    @asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """The durable store's lock on the session, within what is left of the timeout."""
        async with self.durable.lock(session_id, timeout=_time_left(deadline)):
            yield

    async def _session(self, session_id: str) -> list[_Doc]:
        cached = self._hot.get(session_id)
        if cached is not None and self.single_writer:
            return cached
        docs = await self._with_warm(lambda warm: _async_refresh(warm, session_id, cached), None)
        if docs is None:
            docs = await _async_refresh(self.durable, session_id, cached)
            if docs is None:
                docs = _docs(await self.durable.load(session_id)) if cached else []
            if docs:
                found = _decode(docs)
                await self._with_warm(lambda w: _async_fill(w, session_id, found), session_id, True)
        self._hot.loaded(session_id, docs)
        return docs

    async def _update_warm(self, session_id: str, stored: list[Entry]) -> None:
        done = await self._with_warm(
            lambda warm: _async_fill(warm, session_id, stored), session_id, True
        )
        if done is not False:
            return
        try:  # the warm copy is missing or behind: refill it from the durable store
            entries = await self.durable.load(session_id)
        except StoreError:
            await self._with_warm(lambda warm: warm.delete(session_id), session_id, writes=True)
        else:
            await self._with_warm(lambda w: _async_fill(w, session_id, entries), session_id, True)

    async def _with_warm(
        self, op: Callable[[AsyncStore], Awaitable[T]], session_id: str | None, writes: bool = False
    ) -> T | None:
        written = session_id if writes else None
        if self.warm is None:
            return None
        if not self._state.usable():
            self._state.bypassed(written)
            return None
        try:
            await self._drop_stale(self.warm)
            result = await op(self.warm)
        except StoreError as exc:
            self._state.failed(exc, written, self.warm.url, self.durable.url)
            return None
        self._state.recovered(self.warm.url)
        return result

    async def _drop_stale(self, warm: AsyncStore) -> None:
        for session_id in list(self._state.stale):
            await warm.delete(session_id)
            self._state.stale.discard(session_id)

    async def _probe_warm(self, warm: AsyncStore) -> dict[str, Any]:
        try:
            report = await warm.health()
            if not report.get("ok"):
                raise StoreUnavailableError(str(report.get("error", "not healthy")))
            await self._drop_stale(warm)
        except StoreError as exc:
            self._state.failed(exc, None, warm.url, self.durable.url)
            return _unhealthy(warm, exc)
        self._state.recovered(warm.url)
        return report


async def _async_refresh(
    store: AsyncStore, session_id: str, cached: list[_Doc] | None
) -> list[_Doc] | None:
    if not cached:
        return _docs(await store.load(session_id)) or None
    last = await store.tail(session_id, 1)
    if _current(cached, last):
        return cached
    if not last or last[0].seq <= cached[-1].seq:
        return None
    return merge(cached, _docs(await store.load(session_id, after=cached[-1].seq)))


async def _async_fill(warm: AsyncStore, session_id: str, entries: Sequence[Entry]) -> bool:
    if isinstance(warm, AsyncFillable):
        return await warm.fill(session_id, entries)
    last = await warm.tail(session_id, 1)
    end = last[0].seq if last else 0
    if entries[0].seq > end + 1:
        return False
    missing = [entry for entry in entries if entry.seq > end]
    got = await warm.append(session_id, missing) if missing else []
    if [entry.seq for entry in got] != [entry.seq for entry in missing]:
        await warm.delete(session_id)
    return True
