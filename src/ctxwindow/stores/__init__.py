"""Session stores (docs/stores.md): the contract in ``ctxwindow.stores.base``."""

from ctxwindow.stores.base import AsyncStore, Store, entry_from_json, entry_to_json

__all__ = ["AsyncStore", "Store", "entry_from_json", "entry_to_json"]
