"""Run the service: ``serve(settings)`` and the ``ctxwindow serve`` command.

Before it listens, the service checks what it can check on its own machine:
the settings, the bind address and a file store (SQLite), which must be
writable. If one of these cannot work, the commands (``ctxwindow serve``,
``python -m ctxwindow.server``) end with one line naming the problem (and the
path) on stderr and exit code 2, not a traceback. A server store (Redis,
PostgreSQL) is not waited for: the service starts, and ``/readyz`` answers
503 until the store is reachable.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from ctxwindow.errors import CtxWindowError, StoreUnavailableError
from ctxwindow.server.app import create_app
from ctxwindow.server.settings import Settings, load_settings
from ctxwindow.stores.base import redact_url
from ctxwindow.stores.url import check_extra, open_store

log = logging.getLogger("ctxwindow.server")


WORKER_SETTINGS = "CTXWINDOW_WORKER_SETTINGS"  # how ``serve`` hands settings to workers

GC_THRESHOLD = (10_000, 10, 10)
"""The cyclic collector's thresholds in a service process (Python's are 700, 10, 10): a
request of a long session makes tens of thousands of objects (its turns read, the body
sent), and at Python's thresholds the collector ran every 700 of them and rescanned the
sessions' cached turns, the oldest generation of 100,000 objects, every few requests. In
process, a turn of a session of 20,000 messages at 96,000 tokens spent 7.6 ms of its 32 ms
(mean CPU) in the collector; at these thresholds 26.4 ms in all, as with it off
(docs/server.md)."""


def serve(settings: Settings) -> None:
    """Run uvicorn; refuses a non-loopback host when no API keys are configured, and a
    SQLite store that cannot be written (``check_store``).

    With ``workers`` > 1, uvicorn starts that many processes, each building
    its app from the settings passed in the environment (``app_from_environment``).
    """
    run(settings, prepare(settings))


def prepare(settings: Settings) -> Any:
    """Check the bind address and the store, then build the app (None with several
    workers: each builds its own). Raises what stops the service from working."""
    settings.check_bind()
    check_store(settings.store_url())
    return create_app(settings) if settings.workers == 1 else None


def check_store(url: str) -> None:
    """``StoreUnavailableError`` naming the path if a SQLite store cannot be written
    (a missing directory, a read-only file system, a full disk); other stores pass."""
    if not url.startswith("sqlite:") or url in ("sqlite://", "sqlite:///:memory:"):
        return
    with open_store(url) as store:
        health = store.health()
    if not health["ok"]:
        raise StoreUnavailableError(str(health.get("error", "the store is not usable")))


def run(settings: Settings, app: Any) -> None:
    """Serve ``app`` (or, with several workers, the workers' apps) until stopped."""
    import uvicorn

    collect_less()

    if not logging.getLogger().handlers:  # a command, not an embedding app: show our lines
        logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per upstream call
    # Neither the key nor passwords in URLs are logged: only whether a key is set.
    log.info(
        "serving on %s:%s (%d worker(s)), store %s, upstream %s (API key %s)",
        settings.host, settings.port, settings.workers, redact_url(settings.store_url()),
        redact_url(settings.upstream), "set" if settings.upstream_api_key else "not set",
    )  # fmt: skip
    from ctxwindow.server import http

    protocol = http.configure(settings.header_timeout, settings.body_timeout)
    if settings.workers > 1:
        os.environ[WORKER_SETTINGS] = settings.for_workers()
        uvicorn.run(
            "ctxwindow.server.main:app_from_environment", factory=True, http=protocol,
            workers=settings.workers, host=settings.host, port=settings.port, log_level="info",
        )  # fmt: skip
        return
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", http=protocol)


def app_from_environment() -> Any:
    """A worker's app, from the settings ``serve`` put in the environment."""
    from ctxwindow.server import http

    settings = Settings(**json.loads(os.environ[WORKER_SETTINGS]))
    http.configure(settings.header_timeout, settings.body_timeout)  # this process's deadlines
    collect_less()
    return create_app(settings)


def collect_less() -> None:
    """Run the cyclic collector at ``GC_THRESHOLD`` in this process, one the service owns
    (its commands and workers; an app that mounts ``create_app`` keeps its own settings)."""
    gc.set_threshold(*GC_THRESHOLD)


def serve_command(
    host: str | None = None,
    port: int | None = None,
    store: str | None = None,
    upstream: str | None = None,
    config: str | Path | None = None,
    workers: int | None = None,
    *,
    models_file: str | Path | None = None,
    unknown_models: str | None = None,
) -> None:
    """``ctxwindow serve``: the config file, then environment, then these flags win.

    Settings or a store that cannot work, or a missing extra, raise
    (``STARTUP_ERRORS``) before anything listens; the commands turn that into
    one line and exit code 2 (``refuse``).
    """
    settings = load_settings(
        config, flags=FLAGS, host=host, port=port, store=store, upstream=upstream,
        workers=workers, models_file=models_file, unknown_models=unknown_models,
    )  # fmt: skip
    check_extras(settings)
    serve(settings)


# The command-line flag of each setting ``serve_command`` takes, to name it in errors.
FLAGS = {
    "host": "--host", "port": "--port", "store": "--store", "upstream": "--upstream",
    "workers": "--workers", "models_file": "--model-config", "unknown_models": "--estimate",
}  # fmt: skip


def check_extras(settings: Settings) -> None:
    """``ImportError`` with the pip command if the store, the archive or the rate limit's
    Redis needs an extra that is not installed: said at once, not at the first request."""
    for url in (settings.store_url(), settings.archive_path(), settings.rate_limit_redis()):
        if url is not None:
            check_extra(url)


STARTUP_ERRORS = (ValueError, OSError, ImportError, CtxWindowError)  # what ``refuse`` reports


def refuse(exc: BaseException) -> NoReturn:
    """End the process before it serves: ``ctxwindow: error: …`` on one line, exit code 2."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"ctxwindow: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)
