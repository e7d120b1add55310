"""The store contract: sessions kept as append-only, sequenced lists of entries.

A store keeps every entry a session ever had (eviction moves an entry out of
a window, never out of the store). Sync and async flavours are separate
classes; neither blocks on the other.

- ``append(session_id, entries, idempotency_key=None) -> list[Entry]``: the
  store assigns each entry the next sequence number of the session (1, 2, …)
  and returns the stored copies. Concurrent appends from many threads and
  processes lose nothing and duplicate nothing. With an ``idempotency_key``,
  a retried append with the same key is a no-op that returns the entries the
  first call stored. An append that returned is durable in a durable store.
- ``load(session_id, after=0, limit=None)``: entries with ``seq > after`` in
  order; ``tail(session_id, n)``: the last ``n``; ``get(session_id, id)``;
  ``delete(session_id) -> bool``; ``sessions(prefix=None)``; ``health()``;
  ``close()`` and context-manager support.
- ``replayed(session_id, idempotency_key)``: the entries an earlier append
  with that key stored, or None (the key's append never happened).
- ``lock(session_id, timeout=None)``: a context manager (async with for the
  async stores) that holds the session exclusively until the block ends:
  against every other holder in this process and, for a store that processes
  share (SQLite file, Redis, PostgreSQL), in every other process using it. It
  waits up to ``timeout`` seconds (None: as long as it takes), then raises
  ``SessionBusyError``. It is not reentrant. A holder that dies never leaves
  the session locked for good (see each store for how long it can last).
- Token counts are stored with each entry: loading never re-tokenizes.
- A store that is down raises ``StoreUnavailableError``; other failures of the
  backend raise ``StoreError``; both are mapped at the boundary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

from ctxwindow.errors import SessionBusyError, StoreError
from ctxwindow.messages import Entry

MAX_SESSION_ID = 256


def check_session_id(session_id: str) -> str:
    """Session ids are non-empty strings of at most 256 characters."""
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID:
        raise StoreError(
            f"a session id must be a non-empty string of at most {MAX_SESSION_ID} characters"
        )
    return session_id


def entry_to_json(entry: Entry) -> str:
    """One entry as a JSON document (what durable stores write)."""
    return json.dumps(
        {
            "id": entry.id,
            "seq": entry.seq,
            "message": entry.message,
            "tokens": entry.tokens,
            "pinned": entry.pinned,
            "priority": entry.priority,
            "kind": entry.kind,
            "created_at": entry.created_at,
            "metadata": entry.metadata,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def entry_from_json(text: str | bytes) -> Entry:
    data: dict[str, Any] = json.loads(text)
    return Entry(
        message=data["message"],
        tokens=data["tokens"],
        seq=data["seq"],
        id=data["id"],
        pinned=data["pinned"],
        priority=data["priority"],
        kind=data["kind"],
        created_at=data["created_at"],
        metadata=data["metadata"],
    )


class Store(ABC):
    """A synchronous session store."""

    url: str

    @abstractmethod
    def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        """Append entries; returns the stored copies with their sequence numbers."""

    @abstractmethod
    def load(self, session_id: str, *, after: int = 0, limit: int | None = None) -> list[Entry]:
        """Entries with ``seq > after``, in order (an unknown session has none)."""

    @abstractmethod
    def tail(self, session_id: str, n: int) -> list[Entry]:
        """The last ``n`` entries, in order."""

    @abstractmethod
    def get(self, session_id: str, entry_id: str) -> Entry | None:
        """One entry by id, or None."""

    @abstractmethod
    def delete(self, session_id: str) -> bool:
        """Delete a session; True if it existed."""

    @abstractmethod
    def sessions(self, *, prefix: str | None = None) -> list[str]:
        """Session ids, sorted."""

    @abstractmethod
    def health(self) -> dict[str, Any]:
        """``{"ok": bool, ...}`` with backend details."""

    @abstractmethod
    def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        """The entries an earlier append with ``idempotency_key`` stored, or None."""

    @contextmanager
    def lock(self, session_id: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the session exclusively (see the module docs); ``SessionBusyError`` on timeout."""
        check_session_id(session_id)
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        locks: LocalLocks | None = self.__dict__.get("_session_locks")
        if locks is None:
            locks = self.__dict__.setdefault("_session_locks", LocalLocks())
        with locks.hold(session_id, deadline), self._hold(session_id, deadline):
            yield

    @contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """The lock across processes, once this process holds the session (none by default)."""
        yield

    def close(self) -> None:  # noqa: B027 - stores without resources need nothing
        """Release connections and files."""

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncStore(ABC):
    """An asynchronous session store (the same contract, awaited)."""

    url: str

    @abstractmethod
    async def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]: ...

    @abstractmethod
    async def load(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]: ...

    @abstractmethod
    async def tail(self, session_id: str, n: int) -> list[Entry]: ...

    @abstractmethod
    async def get(self, session_id: str, entry_id: str) -> Entry | None: ...

    @abstractmethod
    async def delete(self, session_id: str) -> bool: ...

    @abstractmethod
    async def sessions(self, *, prefix: str | None = None) -> list[str]: ...

    @abstractmethod
    async def health(self) -> dict[str, Any]: ...

    @abstractmethod
    async def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None: ...

    @asynccontextmanager
    async def lock(self, session_id: str, *, timeout: float | None = None) -> AsyncIterator[None]:
        """Hold the session exclusively (see the module docs); ``SessionBusyError`` on timeout."""
        check_session_id(session_id)
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        locks: AsyncLocalLocks | None = self.__dict__.get("_session_locks")
        if locks is None:
            locks = self.__dict__.setdefault("_session_locks", AsyncLocalLocks())
        async with locks.hold(session_id, deadline), self._hold(session_id, deadline):
            yield

    @asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """The lock across processes, once this process holds the session (none by default)."""
        yield

    async def close(self) -> None:  # noqa: B027 - stores without resources need nothing
        """Release connections and files."""

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


# -- session locks within one process -------------------------------------------------


class LocalLocks:
    """One ``threading.Lock`` per session held or waited for; forgotten when nobody needs it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(session_id, (None, 0))
            lock = lock or threading.Lock()
            self._locks[session_id] = (lock, users + 1)
        try:
            wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if not lock.acquire(timeout=wait):
                raise busy(session_id)
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                lock, users = self._locks[session_id]
                if users == 1:
                    del self._locks[session_id]
                else:
                    self._locks[session_id] = (lock, users - 1)


class AsyncLocalLocks:
    """One ``asyncio.Lock`` per session held or waited for; forgotten when nobody needs it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        lock, users = self._locks.get(session_id, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[session_id] = (lock, users + 1)
        try:
            # At least 1 ms: before Python 3.12, wait_for(…, 0) gives up before the first try.
            wait = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                await asyncio.wait_for(lock.acquire(), wait)
            except asyncio.TimeoutError:
                raise busy(session_id) from None
            try:
                yield
            finally:
                lock.release()
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


def busy(session_id: str) -> SessionBusyError:
    return SessionBusyError(f"session {session_id!r} is held by another request; gave up waiting")


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0
    ):
        raise StoreError(f"a lock timeout must be None or seconds >= 0, got {timeout!r}")


# -- shared by every store: input checks, and URLs in error messages ---------------


def check_entries(entries: Sequence[Entry]) -> None:
    """Raise ``StoreError`` unless ``entries`` is a sequence of entries a store can keep.

    Shared by the stores so that they reject the same input with the same words:
    each item is an ``Entry`` with a non-empty string id (unique in the batch),
    a message dict, a non-negative integer token count and a numeric
    ``created_at``.
    """
    if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)):
        raise StoreError(f"append takes a sequence of entries, got {type(entries).__name__}")
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, Entry):
            raise StoreError(
                f"entries[{i}]: a store keeps Entry objects, got {type(entry).__name__}"
            )
        if not isinstance(entry.id, str) or not entry.id:
            raise StoreError(f"entries[{i}]: an entry id must be a non-empty string")
        if entry.id in seen:
            raise StoreError(f"entries[{i}]: entry id {entry.id!r} appears twice in the batch")
        seen.add(entry.id)
        if not isinstance(entry.message, dict):
            raise StoreError(f"entries[{i}]: the message must be a dict")
        if type(entry.tokens) is not int or entry.tokens < 0:
            raise StoreError(
                f"entries[{i}]: tokens must be a non-negative int, got {entry.tokens!r}"
            )
        if isinstance(entry.created_at, bool) or not isinstance(entry.created_at, (int, float)):
            raise StoreError(f"entries[{i}]: created_at must be a number of seconds")


def encode_entry(entry: Entry, seq: int) -> str:
    """The JSON document of ``entry`` stored at ``seq``; ``StoreError`` if it is not JSON."""
    try:
        return entry_to_json(dataclasses.replace(entry, seq=seq))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"entry {entry.id!r} cannot be stored as JSON: {exc}") from exc


def check_idempotency_key(key: str | None) -> None:
    if key is not None:
        check_replay_key(key)


def check_replay_key(key: str) -> None:
    """``replayed`` needs a key (``append`` also takes None: no key)."""
    if not isinstance(key, str) or not key:
        raise StoreError("an idempotency key must be a non-empty string")


def check_count(name: str, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise StoreError(f"{name} must be a non-negative int, got {value!r}")


_PASSWORD_PARAM = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)")


def redact_url(url: str) -> str:
    """The URL with its password (in the user info or a ``password=`` parameter) as ``***``."""
    parts = urlsplit(url)
    if parts.password is not None:
        user, host = parts.username or "", parts.netloc.rpartition("@")[2]
        url = parts._replace(netloc=f"{user}:***@{host}").geturl()
    return _PASSWORD_PARAM.sub(r"\1***", url)


def scrub(text: str, url: str) -> str:
    """``text`` (an error message) without the passwords that ``url`` holds."""
    secrets = [urlsplit(url).password or ""]
    secrets += [match.group(2).strip("'") for match in _PASSWORD_PARAM.finditer(url)]
    text = text.replace(url, redact_url(url))
    for secret in {s for raw in secrets for s in (raw, unquote(raw)) if len(s) > 2}:
        text = text.replace(secret, "***")  # shorter ones would mangle ordinary words
    return text
