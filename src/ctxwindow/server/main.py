"""Run the service: ``serve(settings)`` and the ``ctxwindow serve`` command."""

from __future__ import annotations

import logging
from pathlib import Path

from ctxwindow.server.app import create_app
from ctxwindow.server.settings import Settings, load_settings
from ctxwindow.stores.base import redact_url

log = logging.getLogger("ctxwindow.server")


def serve(settings: Settings) -> None:
    """Run uvicorn; refuses a non-loopback host when no API keys are configured."""
    import uvicorn

    settings.check_bind()
    app = create_app(settings)
    # Neither the key nor passwords in URLs are logged: only whether a key is set.
    log.info(
        "serving on %s:%s, store %s, upstream %s (API key %s)",
        settings.host, settings.port, redact_url(settings.store_url()),
        redact_url(settings.upstream), "set" if settings.upstream_api_key else "not set",
    )  # fmt: skip
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")


def serve_command(
    host: str | None = None,
    port: int | None = None,
    store: str | None = None,
    upstream: str | None = None,
    config: str | Path | None = None,
) -> None:
    """``ctxwindow serve``: the config file, then environment, then these flags win."""
    settings = load_settings(config, host=host, port=port, store=store, upstream=upstream)
    serve(settings)
