"""Session stores (docs/stores.md): the contract in ``ctxwindow.stores.base``."""

from ctxwindow.stores.base import AsyncStore, Store, entry_from_json, entry_to_json
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.stores.sqlite import AsyncSQLiteStore, SQLiteStore
from ctxwindow.stores.url import open_async_store, open_store

__all__ = [
    "AsyncMemoryStore",
    "AsyncSQLiteStore",
    "AsyncStore",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "entry_from_json",
    "entry_to_json",
    "open_async_store",
    "open_store",
]
