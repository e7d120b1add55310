"""Open a store from a URL: ``memory://``, ``sqlite:///…``, ``redis://…``, ``postgresql://…``.

SQLite URLs follow SQLAlchemy's spelling: ``sqlite:///sessions.db`` is a path
relative to the working directory, ``sqlite:////var/lib/app/sessions.db`` (four
slashes) an absolute one, ``sqlite:///:memory:`` an in-memory database. Query
parameters ``synchronous=NORMAL|FULL`` and ``busy_timeout=SECONDS`` configure it.
Redis (``redis://``, ``rediss://``, ``unix://``; a Redis Cluster:
``redis+cluster://host:port,host:port``) and PostgreSQL (``postgresql://``,
``postgres://``) URLs go to their stores unchanged; those stores need an extra
(the ``redis`` extra, the ``postgres`` extra). A PostgreSQL URL may carry the
store's own ``pooler=transaction`` (behind PgBouncer in transaction mode) and
``lock_ttl=SECONDS``, which the store takes out before libpq sees the URL (see
``ctxwindow.stores.postgres``); a bad value is a ``ValueError`` naming it. With
``create=False`` a SQLite file that does not exist is an error, not a new
database. ``read_only=True`` is for tools that look into a store: it implies
``create=False``, changes nothing on open (no schema is created or migrated)
and refuses writes (see ``ctxwindow.stores.base``). ``default_store_url`` is
the store of ``ctxwindow serve`` when none is given.

>>> open_store("memory://").url
'memory://'
>>> with open_store("sqlite:///:memory:") as store:
...     store.health()["journal_mode"]
'memory'
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxwindow.errors import StoreError
from ctxwindow.extras import install_hint
from ctxwindow.stores.base import AsyncStore, Store
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.stores.sqlite import AsyncSQLiteStore, SQLiteStore

SCHEMES = (
    "memory",
    "sqlite",
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "postgresql",
    "postgres",
)
# scheme -> (module and extra, sync class); the async class is "Async" + the sync one
_BACKENDS = {
    "redis": ("redis", "RedisStore"),
    "rediss": ("redis", "RedisStore"),
    "unix": ("redis", "RedisStore"),  # redis-py's spelling of a Unix socket
    "redis+cluster": ("redis", "RedisStore"),
    "rediss+cluster": ("redis", "RedisStore"),
    "postgresql": ("postgres", "PostgresStore"),
    "postgres": ("postgres", "PostgresStore"),
}
_EXTRAS = {"redis": ("redis",), "postgres": ("psycopg",)}  # extra -> the packages it installs


DEFAULT_STORE_FILE = "sessions.db"


def default_store_url(data_dir: str | os.PathLike[str] = ".") -> str:
    """The store of ``ctxwindow serve`` when none is given: ``sessions.db`` in ``data_dir``.

    >>> default_store_url("/srv/ctx")
    'sqlite:////srv/ctx/sessions.db'
    """
    return f"sqlite:///{Path(data_dir).expanduser().resolve() / DEFAULT_STORE_FILE}"


def open_store(url: str, *, create: bool = True, read_only: bool = False) -> Store:
    """A synchronous store for ``url``; ``StoreError`` lists the schemes if it is unknown.

    ``create=False``: a SQLite file that does not exist is a ``StoreError`` naming
    it, instead of a new, empty database. ``read_only=True``: opened to look,
    as it is (no schema created or migrated); writes are refused.
    """
    scheme, parts = _split(url)
    if scheme == "memory":
        _check_memory(url, parts)
        return MemoryStore(read_only=read_only)
    if scheme == "sqlite":
        path = _sqlite_path(url, parts, create and not read_only)
        return SQLiteStore(path, read_only=read_only, **_sqlite_options(url, parts))
    store = _backend(scheme, url, asynchronous=False, read_only=read_only)
    if not isinstance(store, Store):
        raise TypeError(f"{type(store).__name__} is not a Store")
    return store


def open_async_store(url: str, *, create: bool = True, read_only: bool = False) -> AsyncStore:
    """An asynchronous store for ``url`` (the same URLs and options as ``open_store``)."""
    scheme, parts = _split(url)
    if scheme == "memory":
        _check_memory(url, parts)
        return AsyncMemoryStore(read_only=read_only)
    if scheme == "sqlite":
        path = _sqlite_path(url, parts, create and not read_only)
        return AsyncSQLiteStore(path, read_only=read_only, **_sqlite_options(url, parts))
    store = _backend(scheme, url, asynchronous=True, read_only=read_only)
    if not isinstance(store, AsyncStore):
        raise TypeError(f"{type(store).__name__} is not an AsyncStore")
    return store


def _split(url: str) -> tuple[str, urllib.parse.SplitResult]:
    if not isinstance(url, str):
        raise StoreError(f"a store URL must be a string, got {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES:
        supported = ", ".join(f"{scheme}://" for scheme in SCHEMES)
        raise StoreError(
            f"unknown store URL {url!r}: the supported schemes are {supported}{path_hint(url)}"
        )
    return parts.scheme, parts


def path_hint(url: str) -> str:
    """For a file path given where a store URL belongs, the SQLite URL of that file.

    >>> path_hint("sessions.db")
    "; for a SQLite file write 'sqlite:///sessions.db'"
    """
    if not url or urllib.parse.urlsplit(url).scheme:
        return ""
    return f"; for a SQLite file write {'sqlite:///' + url!r}"


def _check_memory(url: str, parts: urllib.parse.SplitResult) -> None:
    if parts.netloc or parts.path or parts.query:
        raise StoreError(
            f"a memory store URL takes no name or options: use 'memory://', not {url!r}"
        )


def _sqlite_path(url: str, parts: urllib.parse.SplitResult, create: bool) -> str:
    if parts.netloc:
        raise StoreError(
            f"a SQLite URL has no host: {url!r} should be 'sqlite:///relative/path.db'"
            " or 'sqlite:////absolute/path.db'"
        )
    path = urllib.parse.unquote(parts.path[1:])  # drop the '/' that ends 'sqlite://'
    if path and path != ":memory:" and not create and not os.path.isfile(path):
        what = "is not a file" if os.path.exists(path) else "does not exist"
        raise StoreError(f"no SQLite store at {os.path.abspath(path)!r}: the file {what}")
    return path or ":memory:"


def _sqlite_options(url: str, parts: urllib.parse.SplitResult) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if name == "synchronous" and value.upper() in ("NORMAL", "FULL"):
            options[name] = value.upper()
        elif name == "busy_timeout" and _is_number(value):
            options[name] = float(value)
        else:
            raise StoreError(
                f"bad SQLite URL option {name}={value!r} in {url!r}: the options are"
                " synchronous=NORMAL|FULL and busy_timeout=SECONDS"
            )
    return options


def _is_number(text: str) -> bool:
    try:
        return float(text) >= 0
    except ValueError:
        return False


def _backend(scheme: str, url: str, *, asynchronous: bool, read_only: bool) -> object:
    """Import the store module of ``scheme`` lazily and build its store class from ``url``."""
    extra, class_name = _BACKENDS[scheme]
    class_name = "Async" + class_name if asynchronous else class_name
    try:
        module = importlib.import_module(f"ctxwindow.stores.{extra}")
        store_class: Callable[..., object] = getattr(module, class_name)
        return store_class(url, read_only=read_only)
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in _EXTRAS[extra]:
            raise
        raise _missing(extra, exc) from exc


def check_extra(url: str) -> None:
    """Raise now the ``ImportError`` (with the pip command) that opening the store of ``url``
    would raise for want of its extra: a command checks before it starts any work.
    URLs of other stores, and paths, pass."""
    backend = _BACKENDS.get(urllib.parse.urlsplit(url).scheme)
    if backend is None:
        return
    extra = backend[0]
    for package in _EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(package) is not None
        except ImportError as exc:
            raise _missing(extra, exc) from exc
        if not found:
            raise _missing(extra, ModuleNotFoundError(f"No module named {package!r}"))


def _missing(extra: str, exc: ImportError) -> ImportError:
    return ImportError(f"the {extra} store needs its extra: {install_hint(extra)} ({exc})")
