"""The upstream LLM: an OpenAI-compatible endpoint behind an injectable httpx transport.

Transport failures are mapped here, at the boundary, to ``APIError``: a
connection failure, a 5xx or a malformed body is a 502, a timeout a 504. A
stream that does not end properly (no ``[DONE]``, broken off, timed out, or
not an event stream of JSON) ends with an error event the OpenAI SDKs raise
on, and its partial reply is never handed on to be stored (``sse_reply``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson

from ctxwindow.server.errors import APIError
from ctxwindow.server.metrics import Metrics
from ctxwindow.server.settings import Settings

COMPLETIONS = "chat/completions"
LIST_TIMEOUT = 5.0  # seconds the upstream's model list may take at most (it is optional)

logger = logging.getLogger(__name__)


class Upstream:
    """Forwards chat completions; the API key goes in a header and nowhere else."""

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
        self._transport = transport or httpx.AsyncHTTPTransport(limits=pool)
        # Completions go straight to the transport (its connection pool): the client's
        # redirects, cookies and URL merging cost ~0.25 ms a request and do nothing here.
        self._base = settings.upstream
        self._urls: dict[str, httpx.URL] = {}  # by path, made once
        self._headers = headers
        self._timeout = httpx.Timeout(settings.upstream_timeout).as_dict()
        self._list_timeout = httpx.Timeout(min(LIST_TIMEOUT, settings.upstream_timeout)).as_dict()
        self.client = httpx.AsyncClient(
            base_url=settings.upstream + "/", headers=headers,
            timeout=settings.upstream_timeout, transport=self._transport,
        )  # fmt: skip
        self.metrics = metrics

    def _url_of(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(f"{self._base}/{path}")
        return url

    async def _send(
        self, body: dict[str, Any], url: httpx.URL, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """An open response to a POST of ``body`` to ``url`` (its body not read yet)."""
        request = httpx.Request(
            "POST", url, headers=headers or self._headers, content=_encoded(body),
            extensions={"timeout": self._timeout},
        )  # fmt: skip
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    async def complete(self, body: dict[str, Any]) -> tuple[int, Any, bytes]:
        """(status, JSON body, raw body) of a completion; a 4xx is passed on unchanged."""
        status, data, content = await self.post(COMPLETIONS, body)
        if status < 400 and not _is_completion(data):
            raise self.malformed("upstream returned no completion choices")
        return status, data, content

    async def stream(self, body: dict[str, Any]) -> httpx.Response:
        """An open streaming response, or a read 4xx; the caller relays and closes it."""
        return await self.open(COMPLETIONS, body)

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
        """(status, JSON body, raw body) of a POST to ``path`` of the upstream (not chat
        completions: the caller checks the body's shape); a 4xx is passed on unchanged."""
        started = time.perf_counter()
        try:
            response = await self._send(body, self._url_of(path), headers)
            try:
                content = await response.aread()
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise self._failed(exc) from exc
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        self._check_status(response.status_code)
        try:
            return response.status_code, orjson.loads(content), content
        except ValueError as exc:
            raise self.malformed("upstream returned a malformed body") from exc

    async def open(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """``stream`` for a POST to ``path``: an open streaming response, or a read 4xx."""
        started = time.perf_counter()
        try:
            response = await self._send(body, self._url_of(path), headers)
            if response.status_code >= 400:  # read whole: a 4xx is passed on, a 5xx is a 502
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
        """Count a stream that did not end properly (``failed`` of ``sse_reply``)."""
        self._broken(fault)

    async def relay(
        self,
        response: httpx.Response,
        into: StreamedReply,
        finish: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncIterator[bytes]:
        """An open stream's bytes for the client (see ``sse_reply``); closed at the end."""
        try:
            async for piece in sse_reply(response.aiter_bytes(), into, finish, self._broken):
                yield piece
        finally:
            await response.aclose()

    def _broken(self, fault: StreamFault) -> None:
        self.metrics.upstream_errors.labels(fault.kind).inc()

    async def models(self, headers: dict[str, str], params: dict[str, str] | None = None) -> Any:
        """The upstream's ``GET /models`` body; None when it gives none (it fails, times out,
        answers another status than 200 or a body that is not JSON): the list is optional."""
        request = httpx.Request(
            "GET", self._url_of("models"), headers=headers, params=params,
            extensions={"timeout": self._list_timeout},
        )  # fmt: skip
        try:
            response = await self._transport.handle_async_request(request)
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
        await self.client.aclose()

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


def _is_completion(data: Any) -> bool:
    """A body with a first choice that carries a message (what the reply is stored from)."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    return isinstance(choices[0].get("message"), dict)


class StreamedReply:
    """The assistant message that a stream of ``chat.completion.chunk`` events adds up to:
    the content deltas joined, and tool calls assembled from their deltas by index."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None  # from the chunk that reports it
        self.hide_usage = False  # the service asked for usage, not the client: drop its chunk

    def hides(self, chunk: dict[str, Any]) -> bool:
        """Whether ``chunk`` is the usage chunk the client did not ask for."""
        return self.hide_usage and chunk.get("usage") is not None and not chunk.get("choices")

    def add(self, chunk: dict[str, Any]) -> None:
        """Add one ``chat.completion.chunk`` (its first choice's delta); ``StreamFault`` if
        its tool call deltas are not objects with an int ``index`` and string parts."""
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        delta = first.get("delta") if isinstance(first, dict) else None
        if not isinstance(delta, dict):
            return
        self.text.append(str(delta.get("content") or ""))
        for piece in delta.get("tool_calls") or ():
            index, function = _call_delta(piece)
            call = self.calls.setdefault(
                index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            call["id"] = piece.get("id") or call["id"]
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""

    @property
    def empty(self) -> bool:
        return not "".join(self.text) and not self.calls

    def message(self) -> dict[str, Any]:
        """``{"content": ..., "tool_calls": [...]}`` as a non-streamed reply would have it."""
        message: dict[str, Any] = {"content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message


class StreamFault(APIError):
    """An upstream stream that did not end properly; ``kind`` labels the error metric."""

    def __init__(self, kind: str, message: str, *, timeout: bool = False) -> None:
        status, code = (504, "upstream_timeout") if timeout else (502, "bad_gateway")
        super().__init__(status, message, code=code)
        self.kind = kind


class Relayed:
    """How far a relay got: ``ended`` once the stream's last event has been passed on."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False


def closed_late(fault: StreamFault, failed: Callable[[StreamFault], None] | None) -> bytes:
    """What follows a transport error after the stream's last event: the reply was whole
    (and stored), so the client gets no error event, only a blank line that ends the last
    event if it was cut there; the fault is logged and counted (kind ``after_end``)."""
    logger.warning("the upstream closed its stream badly after the last event: %s", fault)
    if failed is not None:
        failed(StreamFault("after_end", str(fault)))
    return b"\n"


def error_event(error: APIError) -> bytes:
    """``error`` as the SSE event the OpenAI SDKs raise on: ``data: {"error": {...}}``.

    It starts with a blank line, which ends an event the client may have half received.
    """
    return b"\ndata: " + bytes(error.response().body) + b"\n\n"


async def sse_reply(
    chunks: AsyncIterator[bytes],
    into: StreamedReply,
    finish: Callable[[], Awaitable[None]] | None = None,
    failed: Callable[[StreamFault], None] | None = None,
) -> AsyncIterator[bytes]:
    """Pass SSE bytes through unchanged (cut at line ends) while collecting the reply.

    ``finish()`` (storing the reply) is awaited before the ``data: [DONE]``
    line is passed on: a client that has seen the end of the stream finds
    the reply stored. It runs in a task of its own, so a client leaving at
    that moment does not cancel it.

    A stream that does not end properly — it stops before ``[DONE]``, breaks
    off (a reset, a read timeout), has a line that is not a server-sent event
    of JSON, or reports an error itself — ends with an error event instead
    (``failed(fault)`` is told), and ``finish()`` is never called: a partial
    reply is not the reply. So does an ``APIError`` raised by ``finish()``.
    A transport error after ``[DONE]`` (an upstream that closes its connection
    badly once it has said everything) is no fault of the reply: it is logged
    and counted, and the client's stream ends as it should (``closed_late``).
    """
    relayed = Relayed()
    try:
        async for piece in _checked(chunks, into, finish, relayed):
            yield piece
    except StreamFault as exc:
        fault = exc
    except httpx.TimeoutException:
        fault = StreamFault("timeout", "the upstream stream timed out before its end", timeout=True)
    except httpx.HTTPError as exc:
        fault = StreamFault("connect", f"the upstream stream broke off: {type(exc).__name__}")
    except APIError as exc:  # from finish(): the reply could not be stored
        yield error_event(exc)
        return
    else:
        return
    if relayed.ended:
        yield closed_late(fault, failed)
        return
    if failed is not None:
        failed(fault)
    yield error_event(fault)


async def _checked(
    chunks: AsyncIterator[bytes],
    into: StreamedReply,
    finish: Callable[[], Awaitable[None]] | None,
    relayed: Relayed,
) -> AsyncIterator[bytes]:
    """The stream's complete lines, each checked, until ``[DONE]``; ``StreamFault`` otherwise."""
    buffer, done = b"", False
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        ready: list[bytes] = []
        for line in lines:
            event = None if done else _event(line)
            if event is _DONE:
                if ready:
                    yield b"".join(ready)
                    ready = []
                if finish is not None:
                    await asyncio.shield(asyncio.ensure_future(finish()))
                done = relayed.ended = True
            elif event is not None:
                into.add(event)
                if into.hides(event):
                    continue
            ready.append(line + b"\n")
        if ready:
            yield b"".join(ready)
    if not done and _event(buffer) is _DONE:  # the last line, without its line end
        if finish is not None:
            await asyncio.shield(asyncio.ensure_future(finish()))
        done = relayed.ended = True
    if not done:
        raise StreamFault("malformed", "the upstream stream ended before data: [DONE]")
    if buffer:
        yield buffer


_DONE: dict[str, Any] = {}  # what ``_event`` returns for ``data: [DONE]``


def _event(line: bytes) -> dict[str, Any] | None:
    """The JSON object of a ``data:`` line, ``_DONE`` for ``data: [DONE]``, None for the other
    lines of an event stream (blank, comment, other fields); ``StreamFault`` for the rest."""
    line = line.rstrip(b"\r")
    field, colon, value = line.partition(b":")
    if not line or not field or (colon and field in (b"event", b"id", b"retry")):
        return None
    if field != b"data":
        raise StreamFault(
            "malformed", f"the upstream stream sent a line that is not SSE: {_shown(line)}"
        )
    value = value.strip()
    if value == b"[DONE]":
        return _DONE
    try:
        data = orjson.loads(value)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise StreamFault(
            "malformed", f"the upstream stream sent data that is not JSON: {_shown(line)}"
        )
    if data.get("error"):
        error = data["error"]
        said = error.get("message") if isinstance(error, dict) else error
        raise StreamFault("status", f"the upstream stream reported an error: {said}")
    return data


def _shown(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return repr(text if len(text) <= 80 else text[:80] + "…")


def _call_delta(piece: Any) -> tuple[int, dict[str, Any]]:
    """A tool call delta's index and function part; ``StreamFault`` if it is malformed."""
    if isinstance(piece, dict):
        index, function = piece.get("index", 0), piece.get("function") or {}
        if type(index) is int and isinstance(function, dict):
            parts = piece.get("id"), function.get("name"), function.get("arguments")
            if all(part is None or isinstance(part, str) for part in parts):
                return index, function
    raise StreamFault("malformed", "the upstream stream sent a malformed tool call delta")


def event_of(line: bytes) -> dict[str, Any] | None:
    """One line of an event stream read as ``sse_reply`` reads it (see ``_event``); for the
    relays of the other protocols (``events.py``). ``data: [DONE]`` is an empty dict."""
    return _event(line)
