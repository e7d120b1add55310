"""``create_app(settings)``: the HTTP service as an app factory of small pieces.

>>> app = create_app(Settings(store="memory://"))
>>> sorted(app.openapi()["paths"])[:3]
['/healthz', '/metrics', '/readyz']
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
from fastapi import Depends, FastAPI, Header, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ctxwindow.context import ArchiveLike
from ctxwindow.redact import RedactFn
from ctxwindow.server import (
    count_tokens,
    docs,
    models,
    openapi,
    routes,
    sessions,
    stored_responses,
    ui,
)
from ctxwindow.server.errors import install
from ctxwindow.server.protocols.anthropic import keyed_tenant
from ctxwindow.server.service import Service
from ctxwindow.server.settings import Settings
from ctxwindow.stores.base import AsyncStore


def create_app(
    settings: Settings,
    *,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    store: AsyncStore | None = None,
    redactor: RedactFn | None = None,
    archive: ArchiveLike | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """The service for ``settings``.

    The upstream transport, store, redactor (any callable message -> message; its
    ``counts`` are exported as metrics), archive (recall of evicted turns) and the
    rate limiter's clock are injectable.
    """
    owned = None
    if archive is None and (path := settings.archive_path()) is not None:
        archive = owned = open_archive(
            path, dense=settings.embedder == "default", threads=settings.embedding_threads()
        )
    if redactor is None:
        redactor = _default_redactor(settings)
    service = Service(
        settings, store=store, upstream_transport=upstream_transport, redactor=redactor,
        archive=archive, clock=clock,
    )  # fmt: skip
    app = FastAPI(
        title="ctxwindow", version="0.1.0", lifespan=_lifespan(service, owned),
        docs_url=None, redoc_url=None,  # their CDN pages; docs.install serves ours
    )  # fmt: skip
    app.state.service = service
    install(app)
    tenant = _tenant(service)
    app.include_router(routes.router(service, tenant))
    app.include_router(stored_responses.router(service, tenant))
    app.include_router(count_tokens.router(service))
    app.include_router(models.router(service, keyed_tenant(service)))
    app.include_router(sessions.router(service, tenant))
    if settings.ui:
        app.include_router(ui.router())
    _add_probes(app, service)
    openapi.install(app, settings)
    docs.install(app)
    return app


def _default_redactor(settings: Settings) -> RedactFn | None:
    """The built-in ``Redactor`` unless ``settings.redact`` is ``"off"``."""
    if settings.redact == "off":
        return None
    from ctxwindow.redact import Redactor

    return Redactor()


def _lifespan(
    service: Service, owned: Any
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """On start-up, load what calibration learnt; on shutdown, close the service, then the
    archive the app opened itself (if any)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await service.calibration.load()
            yield
        finally:  # a start-up that failed closes what it opened too
            try:
                await service.aclose()
            finally:
                if owned is not None:
                    owned.close()

    return lifespan


def _tenant(service: Service) -> Callable[..., Awaitable[str]]:
    """The dependency naming the request's tenant (from ``Authorization``), once admitted."""

    async def tenant(authorization: str | None = Header(None)) -> str:
        name = service.tenants.authenticate(authorization)
        await service.tenants.admit(name)
        return name

    return tenant


def _operator(service: Service) -> Callable[..., Awaitable[None]]:
    """The dependency of ``/metrics``: with API keys, one of them, unless ``metrics_public``.

    Metrics are the whole service's (every tenant's traffic, redactions by
    type, upstream failures), so they are not open where keys guard the rest.
    The scrape is not counted in the rate limit.
    """

    async def operator(authorization: str | None = Header(None)) -> None:
        if not service.settings.metrics_public:
            service.tenants.authenticate(authorization)

    return operator


def open_archive(where: str, *, dense: bool = True, threads: int = 0) -> Any:
    """A PostgreSQL archive for a ``postgresql://`` URL (shared by every machine), else a
    SQLite archive in that file (shared by the processes of one machine); with ``dense``,
    searched by meaning too when the packaged embedder is installed (``default_embedder``),
    ``threads`` cores a call (0: every core)."""
    from ctxwindow.archive.embedders import default_embedder

    embedder = default_embedder() if dense else None
    if embedder is not None and hasattr(embedder, "threads"):
        embedder.threads = threads or None
    if where.startswith(("postgresql://", "postgres://")):
        from ctxwindow.archive.postgres import PostgresArchive

        return PostgresArchive(where, embedder=embedder)
    from ctxwindow.archive.sqlite import SQLiteArchive

    return SQLiteArchive(where, embedder=embedder)


_READY = {
    "type": "object",
    "required": ["ready", "store", "upstream"],
    "properties": {k: {"type": "boolean"} for k in ("ready", "store", "upstream")},
}
_READINESS: dict[int | str, dict[str, Any]] = {
    200: {"description": "Ready", "content": {"application/json": {"schema": _READY}}},
    503: {
        "description": "The store or the upstream does not answer",
        "content": {"application/json": {"schema": _READY}},
    },
}


def _add_probes(app: FastAPI, service: Service) -> None:
    """/healthz and /readyz, open to probes even with API keys; /metrics (see ``_operator``)."""

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> Any:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses=_READINESS)
    async def readyz() -> Any:
        """The store answers and the upstream is reachable (both asked at once)."""
        store, upstream = await asyncio.gather(service.store.health(), service.upstream.reachable())
        ready = bool(store.get("ok")) and upstream
        body = {"ready": ready, "store": bool(store.get("ok")), "upstream": upstream}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get(
        "/metrics", tags=["ops"], dependencies=[Depends(_operator(service))],
        response_class=PlainTextResponse,
        responses={200: {"description": "Prometheus text format"}},
    )  # fmt: skip
    async def metrics() -> Response:
        """Prometheus metrics of this app."""
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)
