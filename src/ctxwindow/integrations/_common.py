"""What every adapter shares: the install hint, and the managers behind an adapter object."""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Union

from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.extras import install_hint
from ctxwindow.stores.base import AsyncStore, Store
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore

__all__ = ["DEFAULT_STORE", "AnyManager", "AnyStore", "Managers", "require"]

DEFAULT_STORE = "sqlite:///ctxwindow.db"

AnyStore = Union[str, Store, AsyncStore]  # noqa: UP007 (an alias, evaluated on 3.10)
AnyManager = Union[ContextManager, AsyncContextManager]  # noqa: UP007


def require(module: str, extra: str) -> ModuleType:
    """Import a framework's ``module``; ``ImportError`` naming the extra if it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this adapter needs {module.split('.')[0]!r}: {install_hint(extra)}"
        ) from exc


class Managers:
    """The managers behind one adapter object, each made on first use and then kept.

    Sync methods use a ``ContextManager``, async ones an ``AsyncContextManager``,
    both on ``store`` with the budget ``max_tokens`` (tokens, or a ratio of the
    model's window) and ``options`` for the manager. Both work on the same
    data: a URL opens a sync and an async store on it (``memory://`` one
    ``MemoryStore`` shared by both), a ``MemoryStore`` is shared with an
    ``AsyncMemoryStore``. With another sync ``Store`` object there is no async
    manager: ``call`` runs the sync one in a worker thread (never on the event
    loop), ``strict_async`` refuses; with an ``AsyncStore`` object only the
    async manager exists. A ``manager`` given serves its own flavour in place
    of the store, and is never closed here.
    """

    def __init__(
        self,
        store: AnyStore,
        model: str,
        max_tokens: int | float,
        options: Mapping[str, Any],
        *,
        manager: AnyManager | None = None,
    ) -> None:
        self.model = model
        self.given = manager
        self._store = MemoryStore() if store == "memory://" else store
        self._settings: dict[str, Any] = {"budget": max_tokens, **options}
        self._sync: ContextManager | None = None
        self._async: AsyncContextManager | None = None
        self._lock = threading.Lock()

    @property
    def sync(self) -> ContextManager:
        """The sync manager; ``TypeError`` if there is only an async store or manager."""
        if isinstance(self.given, ContextManager):
            return self.given
        with self._lock:
            if self._sync is None:
                self._sync = ContextManager(self._sync_store(), self.model, **self._settings)
            return self._sync

    @property
    def asynchronous(self) -> AsyncContextManager | None:
        """The async manager; None if there is only a sync store or manager."""
        if self.given is not None:
            return self.given if isinstance(self.given, AsyncContextManager) else None
        with self._lock:
            if self._async is None and (store := self._async_store()) is not None:
                self._async = AsyncContextManager(store, self.model, **self._settings)
            return self._async

    @property
    def strict_async(self) -> AsyncContextManager:
        """The async manager; ``TypeError`` where ``asynchronous`` is None, for adapters
        whose async methods never fall back on the sync manager."""
        manager = self.asynchronous
        if manager is None:
            raise TypeError(
                f"the async methods need an AsyncStore or a store URL, got {self._kind()}:"
                " use the sync methods, or give store= a URL to use both"
            )
        return manager

    def _sync_store(self) -> str | Store:
        store = self._store
        if self.given is not None or not isinstance(store, (str, Store)):
            raise TypeError(
                f"the sync methods need a Store or a store URL, got {self._kind()}:"
                " use the async methods, or give store= a URL to use both"
            )
        return store

    def _async_store(self) -> str | AsyncStore | None:
        store = self._store
        if isinstance(store, MemoryStore):
            return AsyncMemoryStore(store)
        return store if isinstance(store, (str, AsyncStore)) else None

    def _kind(self) -> str:
        return type(self.given if self.given is not None else self._store).__name__

    @property
    def budget(self) -> int:
        """The budget in tokens: ``max_tokens``, a ratio resolved against the model's window."""
        manager = self.asynchronous
        return manager.budget if manager is not None else self.sync.budget

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` of the async manager, else of the sync one in a worker thread."""
        manager = self.asynchronous
        if manager is not None:
            return await getattr(manager, method)(*args, **kwargs)
        return await asyncio.to_thread(getattr(self.sync, method), *args, **kwargs)

    def close(self) -> None:
        """Close the sync manager made here (and its store); the next sync call makes another."""
        with self._lock:
            made, self._sync = self._sync, None
        if made is not None:
            made.close()

    async def aclose(self, *, sync: bool = True) -> None:
        """Close the async manager made here, and with ``sync`` the sync one (in a worker
        thread); the next call makes another."""
        with self._lock:
            made, self._async = self._async, None
        if made is not None:
            await made.close()
        if sync and self._sync is not None:
            await asyncio.to_thread(self.close)
