"""Session stores (docs/stores.md): the contract in ``ctxwindow.stores.base``.

Every store class is here, sync and async: memory, SQLite, Redis, PostgreSQL
and tiered, and ``open_store(url)`` / ``open_async_store(url)``. The Redis,
PostgreSQL and tiered classes and ``session_key`` are imported on first use,
so ``import ctxwindow`` does not load backends it may never open (their
drivers, the ``redis`` and ``postgres`` extras, only when a store connects).
"""

from typing import TYPE_CHECKING, Any

from ctxwindow.stores.base import (
    AsyncStore,
    Checkpoint,
    Earlier,
    Store,
    entry_from_json,
    entry_to_json,
)
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.stores.sqlite import AsyncSQLiteStore, SQLiteStore
from ctxwindow.stores.url import open_async_store, open_store

if TYPE_CHECKING:
    from ctxwindow.stores.postgres import AsyncPostgresStore, PostgresStore
    from ctxwindow.stores.redis import AsyncRedisStore, RedisStore
    from ctxwindow.stores.tenants import session_key
    from ctxwindow.stores.tiered import AsyncTieredStore, TieredStore

__all__ = [
    "AsyncMemoryStore",
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "AsyncSQLiteStore",
    "AsyncStore",
    "AsyncTieredStore",
    "Checkpoint",
    "Earlier",
    "MemoryStore",
    "PostgresStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "TieredStore",
    "entry_from_json",
    "entry_to_json",
    "open_async_store",
    "open_store",
    "session_key",
]


def __getattr__(name: str) -> Any:
    """The names imported on first use (PEP 562), each from the package that defines it."""
    if name in ("AsyncPostgresStore", "PostgresStore"):
        from ctxwindow.stores import postgres

        return getattr(postgres, name)
    if name in ("AsyncRedisStore", "RedisStore"):
        from ctxwindow.stores import redis

        return getattr(redis, name)
    if name in ("AsyncTieredStore", "TieredStore"):
        from ctxwindow.stores import tiered

        return getattr(tiered, name)
    if name == "session_key":
        from ctxwindow.stores import tenants

        return tenants.session_key
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
