"""The upstream LLM: an OpenAI-compatible endpoint behind an injectable httpx transport.

Transport failures are mapped here, at the boundary, to ``APIError``: a
connection failure, a 5xx or a malformed body is a 502, a timeout a 504.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from ctxwindow.server.errors import APIError
from ctxwindow.server.metrics import Metrics
from ctxwindow.server.settings import Settings


class Upstream:
    """Forwards chat completions; the API key goes in a header and nowhere else."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {}
        if settings.upstream_api_key is not None:
            headers["Authorization"] = f"Bearer {settings.upstream_api_key.get_secret_value()}"
        self.client = httpx.AsyncClient(
            base_url=settings.upstream + "/",
            headers=headers,
            timeout=settings.upstream_timeout,
            transport=transport,
        )
        self.metrics = metrics

    async def complete(self, body: dict[str, Any]) -> tuple[int, Any, bytes]:
        """(status, JSON body, raw body) of a completion; a 4xx is passed on unchanged."""
        started = time.perf_counter()
        try:
            response = await self.client.post("chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise self._failed(exc) from exc
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        self._check_status(response.status_code)
        try:
            data = response.json()
        except ValueError as exc:
            self.metrics.upstream_errors.labels("malformed").inc()
            raise APIError(502, "upstream returned a malformed body", code="bad_gateway") from exc
        if response.status_code < 400 and not _is_completion(data):
            self.metrics.upstream_errors.labels("malformed").inc()
            raise APIError(502, "upstream returned no completion choices", code="bad_gateway")
        return response.status_code, data, response.content

    async def stream(self, body: dict[str, Any]) -> httpx.Response:
        """An open streaming response, or a read 4xx; the caller relays and closes it."""
        request = self.client.build_request("POST", "chat/completions", json=body)
        started = time.perf_counter()
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._failed(exc) from exc
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        if response.status_code >= 400:  # read whole: a 4xx is passed on, a 5xx is a 502
            await response.aread()
            await response.aclose()
            self._check_status(response.status_code)
        return response

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

    def feed(self, line: bytes) -> None:
        delta = _delta(line)
        self.text.append(str(delta.get("content") or ""))
        for piece in delta.get("tool_calls") or ():
            call = self.calls.setdefault(
                int(piece.get("index", 0)),
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            call["id"] = piece.get("id") or call["id"]
            function = piece.get("function") or {}
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


async def sse_reply(
    chunks: AsyncIterator[bytes],
    into: StreamedReply,
    finish: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """Pass SSE bytes through unchanged (cut at line ends) while collecting the reply.

    ``finish()`` (storing the reply) is awaited before the ``data: [DONE]``
    line is passed on, or at the end of a stream without one: a client that
    has seen the end of the stream finds the reply stored. It runs in a task
    of its own, so a client leaving at that moment does not cancel it.
    """
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        ready: list[bytes] = []
        for line in lines:
            if finish is not None and _is_done(line):
                if ready:
                    yield b"".join(ready)
                    ready = []
                await asyncio.shield(asyncio.ensure_future(finish()))
                finish = None
            into.feed(line)
            ready.append(line + b"\n")
        if ready:
            yield b"".join(ready)
    into.feed(buffer)
    if finish is not None:
        await asyncio.shield(asyncio.ensure_future(finish()))
    if buffer:
        yield buffer


def _is_done(line: bytes) -> bool:
    line = line.strip()
    return line.startswith(b"data:") and line[5:].strip() == b"[DONE]"


def _delta(line: bytes) -> dict[str, Any]:
    line = line.strip()
    if not line.startswith(b"data:"):
        return {}
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return {}
    try:
        choices = json.loads(payload).get("choices") or []
    except (ValueError, AttributeError):
        return {}
    if not choices or not isinstance(choices[0], dict):
        return {}
    delta = choices[0].get("delta") or {}
    return delta if isinstance(delta, dict) else {}
