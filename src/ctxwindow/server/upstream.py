"""The upstream LLM: an OpenAI-compatible endpoint behind an injectable httpx transport.

By default a body read whole (every non-streamed completion) goes through
httpx's interface on aiohttp's connection pool and C parser
(``httpx-aiohttp``): about half the CPU a call of httpx's own transport
(``benchmarks/bench_upstream.py``). Streams keep httpx's own transport:
aiohttp raises a broken connection's error before the bytes it had buffered,
so an upstream that sends its last event and then closes badly would lose
that event (``[DONE]``), and the reply with it. Transport failures are mapped
here, at the boundary, to ``APIError``: a connection failure, a 5xx or a
malformed body is a 502, a timeout a 504. What a protocol's body or stream
holds is read by its adapter (``protocols/``); a stream is relayed by
``sse.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from ctxwindow.server.errors import APIError
from ctxwindow.server.metrics import Metrics
from ctxwindow.server.settings import Settings
from ctxwindow.server.sse import StreamFault

LIST_TIMEOUT = 5.0  # seconds the upstream's model list may take at most (it is optional)

logger = logging.getLogger(__name__)


class Upstream:
    """Sends the protocols' requests upstream; the API key goes in a header and nowhere
    else."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self._key = settings.upstream_api_key
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.get_secret_value()}"
        # One connection for each request slot (``server.slots``), and a few for the
        # readiness probe and calibration: a request with a slot never waits for the pool.
        calls = settings.max_upstream_calls + 4
        pool = httpx.Limits(max_connections=calls, max_keepalive_connections=20)
        # Bodies read whole go through aiohttp (half the CPU a call); streams through httpx's
        # own transport, which relays every byte that came before a broken connection
        # (aiohttp drops what it buffered: a ``[DONE]`` followed by a bad close was lost).
        self._whole = transport or Transport(limits=pool)
        self._streams = transport or httpx.AsyncHTTPTransport(limits=pool)
        # Completions go straight to the transport (its connection pool): the client's
        # redirects, cookies and URL merging cost ~0.25 ms a request and do nothing here.
        self._base = settings.upstream
        self._urls: dict[str, httpx.URL] = {}  # by path, made once
        self._headers = headers
        self._timeout = httpx.Timeout(settings.upstream_timeout).as_dict()
        self._list_timeout = httpx.Timeout(min(LIST_TIMEOUT, settings.upstream_timeout)).as_dict()
        self.client = httpx.AsyncClient(
            base_url=settings.upstream + "/", headers=headers,
            timeout=settings.upstream_timeout, transport=self._whole,
        )  # fmt: skip
        self.metrics = metrics

    def _url_of(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(f"{self._base}/{path}")
        return url

    async def _send(
        self,
        body: dict[str, Any],
        url: httpx.URL,
        headers: dict[str, str] | None = None,
        *,
        whole: bool = True,
    ) -> httpx.Response:
        """An open response to a POST of ``body`` to ``url`` (its body not read yet), to be
        read ``whole`` or as a stream."""
        request = httpx.Request(
            "POST", url, headers=headers or self._headers, content=_encoded(body),
            extensions={"timeout": self._timeout},
        )  # fmt: skip
        transport = self._whole if whole else self._streams
        response = await transport.handle_async_request(request)
        response.request = request
        return response

    def headers(
        self, extra: dict[str, str] | None = None, *, key: str = "bearer"
    ) -> dict[str, str]:
        """Request headers with ``extra``; the API key as ``Authorization: Bearer`` or, with
        ``key="x-api-key"``, in ``x-api-key`` (Anthropic's header)."""
        headers = {**self._headers, **(extra or {})}
        if key == "x-api-key" and self._key is not None:
            del headers["Authorization"]
            headers["x-api-key"] = self._key.get_secret_value()
        return headers

    async def post(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, Any, bytes]:
        """(status, JSON body, raw body) of a POST to ``path`` of the upstream (the caller
        checks the body's shape); a 4xx is passed on unchanged."""
        response = await self._exchange(path, body, headers, whole=True)
        try:
            return response.status_code, orjson.loads(response.content), response.content
        except ValueError as exc:
            raise self.malformed("upstream returned a malformed body") from exc

    async def open(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """An open streaming response to a POST to ``path`` (the caller relays and closes
        it), or a 4xx read whole."""
        return await self._exchange(path, body, headers, whole=False)

    async def _exchange(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None, *, whole: bool
    ) -> httpx.Response:
        """The upstream's response, read ``whole`` or open; a 5xx or a failure an ``APIError``."""
        started = time.perf_counter()
        try:
            response = await self._send(body, self._url_of(path), headers, whole=whole)
            if whole or response.status_code >= 400:  # a 4xx is passed on, a 5xx is a 502
                try:
                    await response.aread()
                finally:
                    await response.aclose()
        except httpx.HTTPError as exc:
            raise self._failed(exc) from exc
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        self._check_status(response.status_code)
        return response

    def malformed(self, message: str) -> APIError:
        """A 502 for an upstream body that is not what its protocol answers (counted)."""
        self.metrics.upstream_errors.labels("malformed").inc()
        return APIError(502, message, code="bad_gateway")

    def broken(self, fault: StreamFault) -> None:
        """Count a stream that did not end properly (``failed`` of ``sse.relay``)."""
        self.metrics.upstream_errors.labels(fault.kind).inc()

    async def models(self, headers: dict[str, str], params: dict[str, str] | None = None) -> Any:
        """The upstream's ``GET /models`` body; None when it gives none (it fails, times out,
        answers another status than 200 or a body that is not JSON): the list is optional."""
        request = httpx.Request(
            "GET", self._url_of("models"), headers=headers, params=params,
            extensions={"timeout": self._list_timeout},
        )  # fmt: skip
        try:
            response = await self._whole.handle_async_request(request)
            try:
                content = await response.aread()
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            logger.info("the upstream's model list failed: %s", type(exc).__name__)
            return None
        if response.status_code != 200:
            logger.info("the upstream's model list answered HTTP %d", response.status_code)
            return None
        try:
            return orjson.loads(content)
        except ValueError:
            logger.info("the upstream's model list is not JSON")
            return None

    async def reachable(self) -> bool:
        """Whether the upstream answers HTTP at all (any status)."""
        try:
            await self.client.get("models", timeout=5.0)
        except httpx.HTTPError:
            return False
        return True

    async def aclose(self) -> None:
        await self.client.aclose()  # and ``_whole``
        if self._streams is not self._whole:
            await self._streams.aclose()

    def _check_status(self, status: int) -> None:
        if status >= 500:
            self.metrics.upstream_errors.labels("status").inc()
            raise APIError(502, f"upstream answered HTTP {status}", code="bad_gateway")

    def _failed(self, exc: httpx.HTTPError) -> APIError:
        if isinstance(exc, httpx.TimeoutException):
            self.metrics.upstream_errors.labels("timeout").inc()
            return APIError(504, "upstream timed out", code="upstream_timeout")
        self.metrics.upstream_errors.labels("connect").inc()
        return APIError(502, f"upstream unreachable: {type(exc).__name__}", code="bad_gateway")


def _encoded(body: dict[str, Any]) -> bytes:
    """The body as JSON (orjson: a context of thousands of messages in a fraction of a ms)."""
    return orjson.dumps(body)


class Transport(AiohttpTransport):
    """httpx's transport interface on aiohttp, a failure to answer named as httpx's own
    transport names it.

    httpx-aiohttp raises ``httpx.ConnectTimeout`` for any connection error of
    aiohttp's, so a refused connection or an upstream that hangs up before it
    answers would be "upstream timed out" (a 504). Here only aiohttp's timeouts
    stay timeouts: a refused connection is ``httpx.ConnectError``, a hang-up
    ``httpx.RemoteProtocolError``, a reset ``httpx.ReadError``. A body cut off
    later needs nothing of this: aiohttp reports it as a ``ClientPayloadError``,
    which httpx-aiohttp raises as ``httpx.ReadError`` (a stall as ``ReadTimeout``).
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.TimeoutException as exc:
            cause = exc.__cause__
            if cause is None or isinstance(cause, asyncio.TimeoutError):
                raise
            if isinstance(cause, aiohttp.ClientConnectorError):
                raise httpx.ConnectError(str(cause), request=request) from cause
            if isinstance(cause, aiohttp.ServerDisconnectedError):
                raise httpx.RemoteProtocolError(str(cause), request=request) from cause
            raise httpx.ReadError(str(cause), request=request) from cause
