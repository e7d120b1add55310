"""``AsyncSQLiteStore``: the SQLite store, awaited, on worker threads of its own.

Not generated: it delegates to a ``SQLiteStore`` (every SQLite call blocks,
so it runs on the store's executor) rather than mirroring it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from ctxwindow.concurrency.aio import poll
from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import AsyncStore, Checkpoint, Earlier
from ctxwindow.stores.sqlite.files import LockFile, Synchronous, check_options, sqlite_url
from ctxwindow.stores.sqlite.store import SQLiteStore

T = TypeVar("T")


class AsyncSQLiteStore(AsyncStore):
    """The SQLite store, awaited: every SQLite call runs on the store's own worker threads.

    The file is opened by the first call, off the event loop, so errors about
    the path surface there (``health()`` reports them as ``{"ok": False}``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 5.0,
        max_workers: int = 4,
        read_only: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        check_options(self.path, synchronous, busy_timeout, read_only)
        self.url = sqlite_url(self.path)
        self.read_only = read_only
        self._open = partial(
            SQLiteStore,
            self.path,
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            read_only=read_only,
        )
        self._lock_file = None if read_only else LockFile.beside(self.path)
        self._store: SQLiteStore | None = None
        self._opening = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="ctxwindow-sqlite")

    async def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        return await self._run(lambda s: s._append(session_id, entries, idempotency_key))

    async def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        key = idempotency_key
        return await self._run(lambda s: s._append_after(session_id, entries, key, last))

    async def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        return await self._run(lambda s: s._load(session_id, after, limit))

    async def _tail(self, session_id: str, n: int) -> list[Entry]:
        return await self._run(lambda s: s._tail(session_id, n))

    async def _get(self, session_id: str, entry_id: str) -> Entry | None:
        return await self._run(lambda s: s._get(session_id, entry_id))

    async def _delete(self, session_id: str) -> bool:
        return await self._run(lambda s: s._delete(session_id))

    async def _truncate(self, session_id: str, after: int) -> list[Entry]:
        return await self._run(lambda s: s._truncate(session_id, after))

    async def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        return await self._run(lambda s: s._sessions(prefix, after, limit))

    async def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return await self._run(lambda s: s._replayed(session_id, idempotency_key))

    async def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        return await self._run(lambda s: s._save_checkpoint(session_id, seq, data))

    async def _checkpoint(self, session_id: str) -> Checkpoint | None:
        return await self._run(lambda s: s._checkpoint(session_id))

    async def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        return await self._run(lambda s: s._load_from_checkpoint(session_id, limit))

    async def _earlier(self, session_id: str, before: int) -> Earlier:
        return await self._run(lambda s: s._earlier(session_id, before))

    async def _health(self) -> dict[str, Any]:
        try:
            return await self._run(lambda s: s._health())
        except StoreError as exc:
            return {"ok": False, "store": "sqlite", "path": self.path, "error": str(exc)}

    async def _close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_store)
        self._executor.shutdown(wait=False)

    @contextlib.asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """As ``SQLiteStore._hold``; the lock calls never block, so they run on the loop."""
        lock_file = self._lock_file
        if lock_file is None:
            yield
            return
        fd = lock_file.open()

        async def attempt() -> bool:
            return lock_file.try_lock(fd, session_id)

        try:
            await poll(attempt, deadline, session_id)
            yield
        finally:
            lock_file.release(fd, session_id)

    async def _run(self, call: Callable[[SQLiteStore], T]) -> T:
        self._check_open()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: call(self._sync_store()))

    def _sync_store(self) -> SQLiteStore:
        with self._opening:
            if self._store is None:
                self._check_open()
                self._store = self._open()
            return self._store

    def _close_store(self) -> None:
        with self._opening:
            if self._store is not None:
                self._store.close()
