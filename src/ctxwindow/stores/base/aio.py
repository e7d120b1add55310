"""``AsyncStore``: the store contract, checked once, over a backend's primitives.

The public methods check their input (the same checks, in the same order, for
every backend: open, session id, then the other arguments), answer the
trivial cases (nothing to append, ``limit=0``) and call the backend's
primitives with arguments known to be valid. A backend is its primitives and
nothing else: ``_append``, ``_load``, ``_tail``, ``_get``, ``_delete``,
``_sessions``, ``_replayed``, ``_health``, ``_truncate``, ``_save_checkpoint``
and ``_checkpoint``, and optionally ``_load_from_checkpoint`` and
``_append_after`` (one round trip each), ``_earlier`` (selected in place),
``_hold`` (the lock across processes) and ``_close``. The sync twin,
``stores/base/sync.py``, is generated from this file by ``tools/unasync.py``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

from ctxwindow.concurrency.aio import SessionLocks
from ctxwindow.errors import StoreError, StoreInputError
from ctxwindow.messages import Entry
from ctxwindow.stores.base.checks import (
    Checkpoint,
    Earlier,
    check_after,
    check_checkpoint,
    check_count,
    check_cursor,
    check_entries,
    check_idempotency_key,
    check_last,
    check_page_size,
    check_prefix,
    check_replay_key,
    check_session_id,
    check_timeout,
    earlier_of,
    unstorable,
)

EARLIER_PAGE = 2048  # entries a store reads at a time for ``earlier`` by default


class AsyncStore(ABC):
    """A session store (see ``ctxwindow.stores.base`` for the contract)."""

    url: str
    read_only: bool = False  # opened to look: appends, deletes and the like are refused
    _closed: bool = False

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        """Append entries; returns the stored copies with their sequence numbers."""
        self._check_writable("append")
        check_session_id(session_id)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return []
        return await self._append(session_id, list(entries), idempotency_key)

    async def append_after(
        self,
        session_id: str,
        last: tuple[int, str],
        entries: Sequence[Entry],
        *,
        idempotency_key: str | None = None,
    ) -> list[Entry] | None:
        """``append``, if the session's newest entry is still ``last`` (its ``(seq, id)``;
        ``(0, "")``: the session has none); else None, and nothing is stored.

        A retried ``idempotency_key`` returns the entries its first append stored,
        whatever the newest entry is now. One round trip (every store of ctxwindow;
        the base's default makes a few): a caller that holds the session (``lock``) and
        keeps a copy of its newest entries appends and learns that its copy is current
        together.
        """
        self._check_writable("append")
        check_session_id(session_id)
        check_last(last)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return [] if await self._newest_is(session_id, last) else None
        return await self._append_after(session_id, list(entries), idempotency_key, last)

    async def load(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        """Entries with ``seq > after``, in order (an unknown session has none)."""
        self._check_open()
        check_session_id(session_id)
        check_count("after", after)
        check_count("limit", limit)
        if limit == 0:
            return []
        return await self._load(session_id, after, limit)

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        """The last ``n`` entries, in order."""
        self._check_open()
        check_session_id(session_id)
        check_count("n", n)
        if n == 0:
            return []
        return await self._tail(session_id, n)

    async def get(self, session_id: str, entry_id: str) -> Entry | None:
        """One entry by id, or None."""
        self._check_open()
        check_session_id(session_id)
        if not isinstance(entry_id, str) or not entry_id or unstorable(entry_id) is not None:
            return None  # no such entry could have been stored
        return await self._get(session_id, entry_id)

    async def delete(self, session_id: str) -> bool:
        """Delete a session; True if it existed."""
        self._check_writable("delete a session")
        check_session_id(session_id)
        return await self._delete(session_id)

    async def truncate(self, session_id: str, after: int) -> list[Entry]:
        """Remove the session's entries with ``seq > after`` (all of them for ``after=0``),
        atomically; return them, oldest first (``[]`` if there were none).

        The log stays honest: the next append gets seq ``after + 1``; the
        idempotency keys of removed entries are forgotten (a retry is stored
        again, not answered from a ghost); a checkpoint past ``after`` is
        deleted. An append racing the truncate lands wholly before it (and is
        removed if past ``after``) or wholly after it. ``after`` at or past the
        last seq removes nothing. ``StoreInputError`` unless ``after`` is an
        int >= 0.
        """
        self._check_writable("truncate")
        check_session_id(session_id)
        check_after(after)
        return await self._truncate(session_id, after)

    async def sessions(
        self, *, prefix: str | None = None, after: str | None = None, limit: int | None = None
    ) -> list[str]:
        """Session ids, sorted by code point: those starting with ``prefix``, above ``after``,
        at most ``limit``.

        Pages: pass the last id of a page as ``after`` to get the next one;
        concatenated, the pages are the whole list. ``after`` need not be an
        id that exists. Each backend reads only the page (an index range),
        not every id. ``StoreInputError`` unless ``limit`` is None or an
        int >= 1 and ``after`` None or a string.

        Example: ``sessions(prefix="user-", after=page[-1], limit=100)``, the page after
        ``page``.
        """
        self._check_open()
        prefix = check_prefix(prefix)
        check_cursor(after)
        check_page_size(limit)
        return await self._sessions(prefix, after, limit)

    async def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        """The entries an earlier append with ``idempotency_key`` stored, or None."""
        self._check_open()
        check_session_id(session_id)
        check_replay_key(idempotency_key)
        return await self._replayed(session_id, idempotency_key)

    async def save_checkpoint(self, session_id: str, seq: int, data: bytes) -> None:
        """Keep ``data`` (at most 64 MiB) as the session's checkpoint through entry ``seq``.

        A session has one checkpoint: a save replaces it, unless the stored one
        has a higher ``seq`` (then the save is a no-op: a checkpoint never moves
        backwards). ``StoreInputError`` if the session has fewer than ``seq``
        entries (nothing is saved). The entries are never touched.
        """
        self._check_writable("save a checkpoint")
        check_session_id(session_id)
        data = check_checkpoint(seq, data)
        last = await self._save_checkpoint(session_id, seq, data)
        if last is not None:
            raise StoreInputError(
                f"session {session_id!r} has {last} entries: a checkpoint through entry {seq}"
                " would cover entries it does not have"
            )

    async def checkpoint(self, session_id: str) -> Checkpoint | None:
        """The session's checkpoint as ``(seq, data)``, or None if it has none."""
        self._check_open()
        check_session_id(session_id)
        return await self._checkpoint(session_id)

    async def load_from_checkpoint(
        self, session_id: str, *, limit: int | None = None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        """The checkpoint (or None) and the entries after it (all of them without one), at
        most the ``limit`` newest of them.

        What a cold load needs, read together: in one round trip (and one
        snapshot) where the backend allows.
        """
        self._check_open()
        check_session_id(session_id)
        check_count("limit", limit)
        if limit == 0:
            return await self._checkpoint(session_id), []
        return await self._load_from_checkpoint(session_id, limit)

    async def earlier(self, session_id: str, before: int) -> Earlier:
        """What a cold load that replays only the entries from ``before`` on needs of those
        before it: the pinned entries and system messages, and how many the others are
        with their stored tokens (see ``Earlier``)."""
        self._check_open()
        check_session_id(session_id)
        check_count("before", before)
        if before <= 1:
            return Earlier([], 0, 0)
        return await self._earlier(session_id, before)

    async def health(self) -> dict[str, Any]:
        """``{"ok": bool, ...}`` with backend details; never raises."""
        if self._closed:
            return {"ok": False, "url": self.url, "error": self._closed_error()}
        return await self._health()

    @asynccontextmanager
    async def lock(self, session_id: str, *, timeout: float | None = None) -> AsyncIterator[None]:
        """Hold the session exclusively (see the module docs); ``SessionBusyError`` on timeout."""
        self._check_open()
        check_session_id(session_id)
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        locks: SessionLocks | None = self.__dict__.get("_session_locks")
        if locks is None:
            locks = self.__dict__.setdefault("_session_locks", SessionLocks())
        async with locks.hold(session_id, deadline), self._hold(session_id, deadline):
            yield

    async def close(self) -> None:
        """Release connections and files; every call after is refused (``health`` says so)."""
        if not self._closed:
            self._closed = True
            await self._close()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(self._closed_error())

    def _check_writable(self, action: str) -> None:
        self._check_open()
        if self.read_only:
            raise StoreError(f"the store at {self.url} is opened read-only: it cannot {action}")

    def _closed_error(self) -> str:
        return f"the store at {self.url} is closed"

    # -- the primitives of a backend (arguments already checked) ----------------------

    @abstractmethod
    async def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        """Store a non-empty batch atomically: the stored copies, or a key's first batch."""

    @abstractmethod
    async def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        """Entries ``after`` < seq, at most ``limit`` (None: all; never 0)."""

    @abstractmethod
    async def _tail(self, session_id: str, n: int) -> list[Entry]:
        """The last ``n`` (> 0) entries."""

    @abstractmethod
    async def _get(self, session_id: str, entry_id: str) -> Entry | None: ...

    @abstractmethod
    async def _delete(self, session_id: str) -> bool: ...

    @abstractmethod
    async def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        """Session ids starting with ``prefix`` ("" for all) and above ``after`` (None: from
        the first), sorted by code point, at most ``limit`` (None: all; never 0)."""

    @abstractmethod
    async def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None: ...

    @abstractmethod
    async def _health(self) -> dict[str, Any]: ...

    # A store written before truncate removes nothing: it says so rather than pretend.

    async def _truncate(self, session_id: str, after: int) -> list[Entry]:
        """Remove the entries past ``after`` (>= 0), the idempotency keys that cover any of
        them and a checkpoint past ``after``, atomically; the removed entries, oldest first."""
        raise StoreError(f"{type(self).__name__} at {self.url} cannot remove entries (truncate)")

    # A store written before checkpoints keeps none: saves are dropped and a cold load
    # replays every entry, as it did then. Every store of ctxwindow keeps them.

    async def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        """Replace the checkpoint unless the stored one has a higher seq, atomically.

        Returns None, or the session's last seq if that is below ``seq``
        (then nothing is saved).
        """
        return None

    async def _checkpoint(self, session_id: str) -> Checkpoint | None:
        """The stored ``(seq, data)``, or None."""
        return None

    async def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        """The checkpoint and the (``limit`` newest) entries after it; by default a few calls."""
        checkpoint = await self._checkpoint(session_id)
        after = checkpoint[0] if checkpoint else 0
        if limit is not None:
            last = await self._tail(session_id, 1)
            after = max(after, last[0].seq - limit) if last else after
        return checkpoint, await self._load(session_id, after, limit)

    async def _earlier(self, session_id: str, before: int) -> Earlier:
        """``earlier``, by default read in pages (a backend that can select does better)."""
        found, after = Earlier([], 0, 0), 0
        while after < before - 1:
            page = await self._load(session_id, after, min(EARLIER_PAGE, before - 1 - after))
            if not page:
                break
            found, after = earlier_of(page, found), page[-1].seq
        return found

    async def _append_after(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:  # fmt: skip
        """``_append`` if the newest entry is ``last`` (None if not); a key's first batch
        whatever it is. By default a few calls, atomic only under the session's lock."""
        if idempotency_key is not None:
            earlier = await self._replayed(session_id, idempotency_key)
            if earlier is not None:
                return earlier
        if not await self._newest_is(session_id, last):
            return None
        return await self._append(session_id, entries, idempotency_key)

    async def _newest_is(self, session_id: str, last: tuple[int, str]) -> bool:
        newest = await self._tail(session_id, 1)
        return (newest[0].seq, newest[0].id) == last if newest else last == (0, "")

    @asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """The lock across processes, once this process holds the session (none by default)."""
        yield

    async def _close(self) -> None:  # noqa: B027 - stores without resources need nothing
        """Release the backend's connections and files (once)."""
