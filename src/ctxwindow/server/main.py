"""Run the service: ``serve(settings)`` and the ``ctxwindow serve`` command."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ctxwindow.server.app import create_app
from ctxwindow.server.settings import Settings, load_settings
from ctxwindow.stores.base import redact_url

log = logging.getLogger("ctxwindow.server")


WORKER_SETTINGS = "CTXWINDOW_WORKER_SETTINGS"  # how ``serve`` hands settings to workers


def serve(settings: Settings) -> None:
    """Run uvicorn; refuses a non-loopback host when no API keys are configured.

    With ``workers`` > 1, uvicorn starts that many processes, each building
    its app from the settings passed in the environment (``app_from_environment``).
    """
    import uvicorn

    settings.check_bind()
    if not logging.getLogger().handlers:  # a command, not an embedding app: show our lines
        logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    # Neither the key nor passwords in URLs are logged: only whether a key is set.
    log.info(
        "serving on %s:%s (%d worker(s)), store %s, upstream %s (API key %s)",
        settings.host, settings.port, settings.workers, redact_url(settings.store_url()),
        redact_url(settings.upstream), "set" if settings.upstream_api_key else "not set",
    )  # fmt: skip
    if settings.workers > 1:
        os.environ[WORKER_SETTINGS] = settings.for_workers()
        uvicorn.run(
            "ctxwindow.server.main:app_from_environment", factory=True,
            workers=settings.workers, host=settings.host, port=settings.port, log_level="info",
        )  # fmt: skip
        return
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


def app_from_environment() -> Any:
    """A worker's app, from the settings ``serve`` put in the environment."""
    return create_app(Settings(**json.loads(os.environ[WORKER_SETTINGS])))


def serve_command(
    host: str | None = None,
    port: int | None = None,
    store: str | None = None,
    upstream: str | None = None,
    config: str | Path | None = None,
    workers: int | None = None,
) -> None:
    """``ctxwindow serve``: the config file, then environment, then these flags win."""
    settings = load_settings(
        config, host=host, port=port, store=store, upstream=upstream, workers=workers
    )
    serve(settings)
