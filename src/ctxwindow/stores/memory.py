"""In-process stores: the reference implementation of the store contract.

``MemoryStore`` keeps each session as a list of JSON documents, the same text a
durable store writes, so an entry comes back exactly as it would from SQLite
and no caller can mutate what is stored. It is thread-safe and not durable:
everything is lost when the process exits.

>>> from ctxwindow import Entry
>>> store = MemoryStore()
>>> [stored.seq for stored in store.append("s1", [Entry({"role": "user", "content": "hi"}, 1, 0)])]
[1]
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import AsyncStore, Checkpoint, Store, encode_entry, entry_from_json


@dataclasses.dataclass
class _Session:
    documents: list[str] = dataclasses.field(default_factory=list)  # seq n at index n - 1
    seq_by_id: dict[str, int] = dataclasses.field(default_factory=dict)
    seqs_by_key: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)


class MemoryStore(Store):
    """A thread-safe, in-process store (not durable: use it for tests and scripts).

    ``read_only=True`` refuses writes (as every store does when opened to look).
    """

    def __init__(self, *, read_only: bool = False) -> None:
        self.url = "memory://"
        self.read_only = read_only
        self._data: dict[str, _Session] = {}
        self._checkpoints: dict[str, Checkpoint] = {}  # apart: they make no session exist
        self._lock = threading.Lock()

    def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        stored = self._stored(session_id, entries, idempotency_key, None)
        assert stored is not None  # only a ``last`` refuses
        return stored

    def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        return self._stored(session_id, entries, idempotency_key, last)

    def _stored(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str] | None,
    ) -> list[Entry] | None:
        """``_append`` (``last`` None), or only after ``last``: one step under the lock."""
        with self._lock:
            session = self._data.get(session_id) or _Session()
            if idempotency_key in session.seqs_by_key:
                first, end = session.seqs_by_key[idempotency_key]
                return _decode(session.documents[first - 1 : end])
            if last is not None and not _newest_is(session, last):
                return None
            documents = self._encode_new(session, entries)
            if idempotency_key is not None:
                first = len(session.documents) + 1
                session.seqs_by_key[idempotency_key] = (first, first + len(documents) - 1)
            for document, entry in zip(documents, entries, strict=True):
                session.documents.append(document)
                session.seq_by_id[entry.id] = len(session.documents)
            self._data[session_id] = session
        return _decode(documents)

    @staticmethod
    def _encode_new(session: _Session, entries: Sequence[Entry]) -> list[str]:
        stored = [entry.id for entry in entries if entry.id in session.seq_by_id]
        if stored:
            raise StoreError(f"entry ids already stored in this session: {stored}")
        start = len(session.documents) + 1
        return [encode_entry(entry, seq) for seq, entry in enumerate(entries, start)]

    def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        with self._lock:
            documents = self._documents(session_id)
            stop = None if limit is None else after + limit
            return _decode(documents[after:stop])

    def _tail(self, session_id: str, n: int) -> list[Entry]:
        with self._lock:
            documents = self._documents(session_id)
            return _decode(documents[max(0, len(documents) - n) :])

    def _get(self, session_id: str, entry_id: str) -> Entry | None:
        with self._lock:
            session = self._data.get(session_id)
            seq = session.seq_by_id.get(entry_id) if session else None
            if session is None or seq is None:
                return None
            return entry_from_json(session.documents[seq - 1])

    def _delete(self, session_id: str) -> bool:
        with self._lock:
            self._checkpoints.pop(session_id, None)
            return self._data.pop(session_id, None) is not None

    def _truncate(self, session_id: str, after: int) -> list[Entry]:
        with self._lock:
            session = self._data.get(session_id)
            if session is None or after >= len(session.documents):
                return []
            removed = session.documents[after:]
            del session.documents[after:]
            session.seq_by_id = {i: seq for i, seq in session.seq_by_id.items() if seq <= after}
            session.seqs_by_key = {
                key: seqs for key, seqs in session.seqs_by_key.items() if seqs[1] <= after
            }
            checkpoint = self._checkpoints.get(session_id)
            if checkpoint is not None and checkpoint[0] > after:
                del self._checkpoints[session_id]
            if not session.documents:  # a session is its entries: none left, none listed
                del self._data[session_id]
        return _decode(removed)

    def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        with self._lock:
            listed = [s for s in self._data if s.startswith(prefix)]
        return sorted(s for s in listed if after is None or s > after)[:limit]

    def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        with self._lock:
            session = self._data.get(session_id)
            seqs = session.seqs_by_key.get(idempotency_key) if session else None
            if session is None or seqs is None:
                return None
            return _decode(session.documents[seqs[0] - 1 : seqs[1]])

    def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        with self._lock:
            last = len(self._documents(session_id))
            if seq > last:
                return last
            stored = self._checkpoints.get(session_id)
            if stored is None or stored[0] <= seq:
                self._checkpoints[session_id] = (seq, data)
            return None

    def _checkpoint(self, session_id: str) -> Checkpoint | None:
        with self._lock:
            return self._checkpoints.get(session_id)  # bytes: nobody can change them

    def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        with self._lock:
            checkpoint = self._checkpoints.get(session_id)
            documents = self._documents(session_id)
            start = checkpoint[0] if checkpoint else 0
            if limit is not None:
                start = max(start, len(documents) - limit)
            documents = documents[start:]
        return checkpoint, _decode(documents)

    def _health(self) -> dict[str, Any]:
        with self._lock:
            entries = sum(len(session.documents) for session in self._data.values())
            return {
                "ok": True,
                "store": "memory",
                "durable": False,
                "detail": "in-process only: every session is lost when the process exits",
                "sessions": len(self._data),
                "entries": entries,
            }

    def _documents(self, session_id: str) -> list[str]:
        session = self._data.get(session_id)
        return session.documents if session else []


def _newest_is(session: _Session, last: tuple[int, str]) -> bool:
    seq, entry_id = last
    return len(session.documents) == seq and (seq == 0 or session.seq_by_id.get(entry_id) == seq)


def _decode(documents: Sequence[str]) -> list[Entry]:
    return [entry_from_json(document) for document in documents]


class AsyncMemoryStore(AsyncStore):
    """The in-process store, awaited; pass a ``MemoryStore`` to share it with sync code.

    Every call is a short, lock-protected dict operation, so it runs on the
    event loop without a thread. ``read_only=True`` refuses writes: a view that
    only reads the ``MemoryStore`` it is given.
    """

    def __init__(self, store: MemoryStore | None = None, *, read_only: bool = False) -> None:
        self._store = store if store is not None else MemoryStore()
        self.url = self._store.url
        self.read_only = read_only

    async def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        return self._store._append(session_id, entries, idempotency_key)

    async def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        return self._store._append_after(session_id, entries, idempotency_key, last)

    async def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        return self._store._load(session_id, after, limit)

    async def _tail(self, session_id: str, n: int) -> list[Entry]:
        return self._store._tail(session_id, n)

    async def _get(self, session_id: str, entry_id: str) -> Entry | None:
        return self._store._get(session_id, entry_id)

    async def _delete(self, session_id: str) -> bool:
        return self._store._delete(session_id)

    async def _truncate(self, session_id: str, after: int) -> list[Entry]:
        return self._store._truncate(session_id, after)

    async def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        return self._store._sessions(prefix, after, limit)

    async def _health(self) -> dict[str, Any]:
        return self._store._health()

    async def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return self._store._replayed(session_id, idempotency_key)

    async def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        return self._store._save_checkpoint(session_id, seq, data)

    async def _checkpoint(self, session_id: str) -> Checkpoint | None:
        return self._store._checkpoint(session_id)

    async def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        return self._store._load_from_checkpoint(session_id, limit)
