"""What every adapter shares: the install hint, and the managers behind a session."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.extras import install_hint
from ctxwindow.stores.base import AsyncStore, Store

DEFAULT_STORE = "sqlite:///ctxwindow.db"


def require(module: str, extra: str) -> ModuleType:
    """Import a framework's ``module``; ``ImportError`` naming the extra if it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this adapter needs {module.split('.')[0]!r}: {install_hint(extra)}"
        ) from exc


def sync_manager(
    store: str | Store = DEFAULT_STORE,
    model: str = "gpt-4o",
    max_tokens: int | float = 0.75,
    **options: Any,
) -> ContextManager:
    """A ``ContextManager`` on ``store`` (a URL or a store) with the budget ``max_tokens``
    (tokens, or a ratio of the model's window); ``options`` go to the manager."""
    return ContextManager(store, model, budget=max_tokens, **options)


def async_manager(
    store: str | AsyncStore = DEFAULT_STORE,
    model: str = "gpt-4o",
    max_tokens: int | float = 0.75,
    **options: Any,
) -> AsyncContextManager:
    """The ``AsyncContextManager`` twin of ``sync_manager``."""
    return AsyncContextManager(store, model, budget=max_tokens, **options)
