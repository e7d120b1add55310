"""Shared fixtures and Hypothesis settings."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.browser"]  # the ``browser`` fixture (headless chromium)

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@contextmanager
def async_stores(kind: str, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Opens ``AsyncStore`` objects of ``kind`` (memory, sqlite, redis, postgresql) that
    share one fresh set of data — as processes share a store; removed after.

    Redis and PostgreSQL are the real servers (see ``require_server``); each
    set gets its own key prefix or schema, so tests never see each other.
    """
    from tests.test_store_contract import require_server

    name = f"ctxwindow_test_{uuid.uuid4().hex[:12]}"
    if kind == "memory":
        from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore

        shared = MemoryStore()
        yield lambda: AsyncMemoryStore(shared)
    elif kind == "sqlite":
        from ctxwindow.stores.sqlite import AsyncSQLiteStore

        yield lambda: AsyncSQLiteStore(tmp_path / f"{name}.db")
    elif kind == "redis":
        import redis

        from ctxwindow.stores.redis import AsyncRedisStore

        url = require_server(kind)
        yield lambda: AsyncRedisStore(url, prefix=name)
        with redis.Redis.from_url(url) as client:
            keys = list(client.scan_iter(match=f"{name}:*", count=1000))
            if keys:
                client.delete(*keys)
    else:
        import psycopg

        from ctxwindow.stores.postgres import AsyncPostgresStore

        url = require_server(kind)
        yield lambda: AsyncPostgresStore(url, schema=name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@contextmanager
def async_store(kind: str, tmp_path: Path) -> Iterator[Any]:
    """One ``AsyncStore`` of ``kind`` on fresh data (see ``async_stores``)."""
    with async_stores(kind, tmp_path) as open_store:
        yield open_store()
