# Generated from src/ctxwindow/stores/tiered/aio.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py`.
"""``TieredStore``: the store's primitives over its tiers, which are stores themselves.

The base (``Store``) checks every argument first; these methods call
the public methods of the durable and warm stores and keep the hot tier of
``common``. A read goes hot → warm → durable; an append goes to the durable
store, then best effort to the warm and hot tiers. ``stores/tiered/sync.py``
is generated from this file by ``tools/unasync.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import Checkpoint, Earlier, Store
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
class Fillable(Protocol):
    """A warm store that takes entries numbered by the durable store (``RedisStore``)."""

    def fill(self, session_id: str, entries: Sequence[Entry]) -> bool: ...


class TieredStore(Store):
    """Hot in-process LRU → ``warm`` store (normally ``RedisStore(ttl=…)``) → ``durable``.

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
        self._hot = HotTier(hot_size)
        self._state = WarmState(retry_after, clock)

    # -- the primitives (arguments checked by the base) -------------------------------

    def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        epoch = self._hot.epoch
        stored = self.durable.append(session_id, entries, idempotency_key=idempotency_key)
        return self._appended(session_id, stored, epoch)

    def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        """The durable store's ``append_after`` (the session's newest entry is its)."""
        epoch = self._hot.epoch
        key = idempotency_key
        stored = self.durable.append_after(session_id, last, entries, idempotency_key=key)
        return None if stored is None else self._appended(session_id, stored, epoch)

    def _appended(self, session_id: str, stored: list[Entry], epoch: int) -> list[Entry]:
        """``stored``, which the durable store appended, kept in the hot and warm tiers too."""
        if stored:
            self._hot.appended(session_id, stored, epoch)
            self._update_warm(session_id, stored)
        return stored

    def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        return load_window(self._session(session_id), after, limit)

    def _tail(self, session_id: str, n: int) -> list[Entry]:
        docs = self._session(session_id)
        return decode(docs[-n:])

    def _get(self, session_id: str, entry_id: str) -> Entry | None:
        return find(self._session(session_id), entry_id)

    def _delete(self, session_id: str) -> bool:
        existed = self.durable.delete(session_id)
        self._hot.pop(session_id)
        self._warm_delete(session_id)
        return existed

    def _truncate(self, session_id: str, after: int) -> list[Entry]:
        removed = self.durable.truncate(session_id, after)
        if removed:
            self._hot.truncated(session_id)
            with self._warm_tier(written=session_id) as warm:
                if warm is not None:
                    warm.truncate(session_id, after)
        return removed

    def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        return self.durable.sessions(prefix=prefix, after=after, limit=limit)

    def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return self.durable.replayed(session_id, idempotency_key)

    # Checkpoints live in the durable store only: a cold load reads it there once.

    def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        self.durable.save_checkpoint(session_id, seq, data)
        return None

    def _checkpoint(self, session_id: str) -> Checkpoint | None:
        return self.durable.checkpoint(session_id)

    def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        return self.durable.load_from_checkpoint(session_id, limit=limit)

    def _earlier(self, session_id: str, before: int) -> Earlier:
        return self.durable.earlier(session_id, before)

    def _health(self) -> dict[str, Any]:
        try:
            health = report(self.durable.health(), self._hot)
        except StoreError as exc:
            health = report(unhealthy(self.durable.url, exc), self._hot)
        if self.warm is not None:
            health["warm"] = self._probe_warm(self.warm)
            health["degraded"] = self._state.error is not None
        return health

    @contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """The durable store's lock on the session, within what is left of the timeout."""
        with self.durable.lock(session_id, timeout=time_left(deadline)):
            yield

    def _close(self) -> None:
        try:
            if self.warm is not None:
                self.warm.close()
        finally:
            self.durable.close()

    # -- reads and writes across the tiers ----------------------------------------------

    def _session(self, session_id: str) -> list[Doc]:
        """The whole session, from the highest tier that has it current."""
        epoch, cached = self._hot.epoch, self._hot.get(session_id)
        if cached is not None and self.single_writer:
            return cached
        docs = self._warm_refresh(session_id, cached)
        if docs is None:
            docs = self._durable_docs(session_id, cached)
        stale = bool(cached) and not extends(docs, cached or [])  # truncated by another process
        self._hot.loaded(session_id, docs, epoch, replace=stale)
        return docs

    def _durable_docs(self, session_id: str, cached: list[Doc] | None) -> list[Doc]:
        """The session from the durable store, copied into the warm tier."""
        docs = _refresh(self.durable, session_id, cached)
        if docs is None:
            docs = docs_of(self.durable.load(session_id)) if cached else []
        if docs:
            self._warm_fill(session_id, decode(docs))
        return docs

    def _update_warm(self, session_id: str, stored: list[Entry]) -> None:
        if self._warm_fill(session_id, stored) is not False:
            return
        try:  # the warm copy is missing or behind: refill it from the durable store
            entries = self.durable.load(session_id)
        except StoreError:
            self._warm_delete(session_id)
        else:
            self._warm_fill(session_id, entries)

    # -- the warm tier: bypassed while it fails ----------------------------------------

    def _warm_refresh(self, session_id: str, cached: list[Doc] | None) -> list[Doc] | None:
        with self._warm_tier() as warm:
            if warm is not None:
                return _refresh(warm, session_id, cached)
        return None

    def _warm_fill(self, session_id: str, entries: Sequence[Entry]) -> bool | None:
        """Whether the entries were copied (False: they would leave a gap); None: no warm tier."""
        with self._warm_tier(written=session_id) as warm:
            if warm is not None:
                return _fill(warm, session_id, entries)
        return None

    def _warm_delete(self, session_id: str) -> None:
        with self._warm_tier(written=session_id) as warm:
            if warm is not None:
                warm.delete(session_id)

    @contextmanager
    def _warm_tier(self, written: str | None = None) -> Iterator[Store | None]:
        """The warm store for one block of work, or None when none is in use.

        A ``StoreError`` in the block is recorded (the warm store is bypassed
        for ``retry_after`` seconds), not raised. ``written`` is the session
        the block writes: if the warm store misses the write, that session is
        dropped from it once it is back.
        """
        warm = self._usable_warm(written)
        if warm is None:
            yield None
            return
        try:
            yield warm
        except StoreError as exc:
            self._state.failed(exc, written, warm.url, self.durable.url)
        else:
            self._state.recovered(warm.url)

    def _usable_warm(self, written: str | None) -> Store | None:
        """The warm store, with what it missed dropped first; None if there is none in use."""
        if self.warm is None:
            return None
        if not self._state.usable():
            self._state.bypassed(written)
            return None
        try:
            self._drop_stale(self.warm)
        except StoreError as exc:
            self._state.failed(exc, written, self.warm.url, self.durable.url)
            return None
        return self.warm

    def _drop_stale(self, warm: Store) -> None:
        for session_id in list(self._state.stale):
            warm.delete(session_id)
            self._state.stale.discard(session_id)

    def _probe_warm(self, warm: Store) -> dict[str, Any]:
        """The warm store's health; a healthy one is taken back into use."""
        try:
            health = warm.health()
            if not health.get("ok"):
                raise StoreUnavailableError(str(health.get("error", "not healthy")))
            self._drop_stale(warm)
        except StoreError as exc:
            self._state.failed(exc, None, warm.url, self.durable.url)
            return unhealthy(warm.url, exc)
        self._state.recovered(warm.url)
        return health


def _refresh(store: Store, session_id: str, cached: list[Doc] | None) -> list[Doc] | None:
    """The session from ``store``, reusing ``cached`` while current; None if ``store`` lacks it."""
    if not cached:
        return docs_of(store.load(session_id)) or None
    last = store.tail(session_id, 1)
    if is_current(cached, last):
        return cached
    if not last or last[0].seq <= cached[-1].seq:
        return None  # behind the cache (a stale warm copy), or truncated or deleted
    # Read from the cache's newest entry: if it is not there any more, the session was
    # truncated (or deleted) and written anew past the cache, which is then no prefix of it.
    newer = store.load(session_id, after=cached[-1].seq - 1)
    if not newer or newer[0].seq != cached[-1].seq or newer[0].id != cached[-1].id:
        return None
    return merge(cached, docs_of(newer))


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
