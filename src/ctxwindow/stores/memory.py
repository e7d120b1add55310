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
from ctxwindow.stores.base import (
    AsyncStore,
    Store,
    check_count,
    check_entries,
    check_idempotency_key,
    check_replay_key,
    check_session_id,
    encode_entry,
    entry_from_json,
)


@dataclasses.dataclass
class _Session:
    documents: list[str] = dataclasses.field(default_factory=list)  # seq n at index n - 1
    seq_by_id: dict[str, int] = dataclasses.field(default_factory=dict)
    seqs_by_key: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)


class MemoryStore(Store):
    """A thread-safe, in-process store (not durable: use it for tests and scripts)."""

    def __init__(self) -> None:
        self.url = "memory://"
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        check_session_id(session_id)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return []  # nothing to store, and no key to remember
        with self._lock:
            session = self._sessions.get(session_id) or _Session()
            if idempotency_key in session.seqs_by_key:
                first, last = session.seqs_by_key[idempotency_key]
                return _decode(session.documents[first - 1 : last])
            documents = self._encode_new(session, entries)
            if idempotency_key is not None:
                first = len(session.documents) + 1
                session.seqs_by_key[idempotency_key] = (first, first + len(documents) - 1)
            for document, entry in zip(documents, entries, strict=True):
                session.documents.append(document)
                session.seq_by_id[entry.id] = len(session.documents)
            self._sessions[session_id] = session
        return _decode(documents)

    @staticmethod
    def _encode_new(session: _Session, entries: Sequence[Entry]) -> list[str]:
        stored = [entry.id for entry in entries if entry.id in session.seq_by_id]
        if stored:
            raise StoreError(f"entry ids already stored in this session: {stored}")
        start = len(session.documents) + 1
        return [encode_entry(entry, seq) for seq, entry in enumerate(entries, start)]

    def load(self, session_id: str, *, after: int = 0, limit: int | None = None) -> list[Entry]:
        check_session_id(session_id)
        check_count("after", after)
        check_count("limit", limit)
        with self._lock:
            documents = self._documents(session_id)
            stop = None if limit is None else after + limit
            return _decode(documents[after:stop])

    def tail(self, session_id: str, n: int) -> list[Entry]:
        check_session_id(session_id)
        check_count("n", n)
        with self._lock:
            documents = self._documents(session_id)
            return _decode(documents[max(0, len(documents) - n) :] if n else [])

    def get(self, session_id: str, entry_id: str) -> Entry | None:
        check_session_id(session_id)
        if not isinstance(entry_id, str):
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            seq = session.seq_by_id.get(entry_id) if session else None
            if session is None or seq is None:
                return None
            return entry_from_json(session.documents[seq - 1])

    def delete(self, session_id: str) -> bool:
        check_session_id(session_id)
        with self._lock:
            return self._sessions.pop(session_id, None) is not None

    def sessions(self, *, prefix: str | None = None) -> list[str]:
        if prefix is not None and not isinstance(prefix, str):
            raise StoreError("a session prefix must be a string")
        with self._lock:
            return sorted(s for s in self._sessions if prefix is None or s.startswith(prefix))

    def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        check_session_id(session_id)
        check_replay_key(idempotency_key)
        with self._lock:
            session = self._sessions.get(session_id)
            seqs = session.seqs_by_key.get(idempotency_key) if session else None
            if session is None or seqs is None:
                return None
            return _decode(session.documents[seqs[0] - 1 : seqs[1]])

    def health(self) -> dict[str, Any]:
        with self._lock:
            entries = sum(len(session.documents) for session in self._sessions.values())
            return {
                "ok": True,
                "store": "memory",
                "durable": False,
                "detail": "in-process only: every session is lost when the process exits",
                "sessions": len(self._sessions),
                "entries": entries,
            }

    def _documents(self, session_id: str) -> list[str]:
        session = self._sessions.get(session_id)
        return session.documents if session else []


def _decode(documents: Sequence[str]) -> list[Entry]:
    return [entry_from_json(document) for document in documents]


class AsyncMemoryStore(AsyncStore):
    """The in-process store, awaited; pass a ``MemoryStore`` to share it with sync code.

    Every call is a short, lock-protected dict operation, so it runs on the
    event loop without a thread.
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        self._store = store if store is not None else MemoryStore()
        self.url = self._store.url

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        return self._store.append(session_id, entries, idempotency_key=idempotency_key)

    async def load(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        return self._store.load(session_id, after=after, limit=limit)

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        return self._store.tail(session_id, n)

    async def get(self, session_id: str, entry_id: str) -> Entry | None:
        return self._store.get(session_id, entry_id)

    async def delete(self, session_id: str) -> bool:
        return self._store.delete(session_id)

    async def sessions(self, *, prefix: str | None = None) -> list[str]:
        return self._store.sessions(prefix=prefix)

    async def health(self) -> dict[str, Any]:
        return self._store.health()

    async def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return self._store.replayed(session_id, idempotency_key)
