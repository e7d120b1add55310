"""``POST /v1/chat/completions``: the OpenAI API, with the session's context built in.

The request's ``messages`` are the session's new turns. They are stored first
(durably), the context is built within the budget, it replaces ``messages`` in
the body sent upstream, and the reply is stored before the client gets it —
all while the request holds the session (``AsyncContextManager.turn``), so
requests of one session, in any process sharing the store, never interleave.
Without a session id the request passes through, checked against the budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request, Response

from ctxwindow.context import AsyncContextManager
from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry, make_message, validate_message
from ctxwindow.server import exchange, inputs
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.openapi import json_body
from ctxwindow.server.service import Service, check_messages, read_json
from ctxwindow.server.streams import HeldStream
from ctxwindow.server.tenants import scoped
from ctxwindow.server.upstream import StreamedReply

REQUEST_SCHEMA = json_body({
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": {"type": "object"}},
        "stream": {"type": "boolean"},
        "max_tokens": {"type": "integer"},
        "metadata": {"type": "object"},
    },
    "additionalProperties": True,
})  # fmt: skip


def router(service: Service, tenant: Any) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/chat/completions", openapi_extra=REQUEST_SCHEMA, tags=["chat"])
    async def chat_completions(request: Request, tenant: str = Depends(tenant)) -> Response:
        """An OpenAI chat completion over the session's context (``X-Session-Id``)."""
        body = await read_json(request, service.settings.max_request_bytes)
        inputs.check_completion(body)
        tools = inputs.check_tools(body.get("tools"))
        messages = check_messages(body.get("messages"), service.settings.max_message_chars)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise APIError(400, "'model' must be a model name", param="model")
        if service.model(model).estimated:  # its budget depends on the ratios kept
            await service.calibration.load()
        budget = _budget(service, request, body, model)
        session_id = inputs.session_id(request, body)
        if session_id is None:
            return await exchange.in_slot(
                service, tenant, lambda: _stateless(service, body, messages, model, budget)
            )
        tools_tokens = service.tokenizer(model).tools_tokens(tools)
        budget = exchange.less(budget, tools_tokens, "tools", "the tool definitions")
        sid = scoped(tenant, session_id)
        manager = service.manager(model)
        key = inputs.idempotency_key(request)
        # The whole exchange holds the session (against other requests, in any
        # process sharing the store) until the reply is stored.
        return await exchange.in_slot(
            service, tenant, lambda: exchange.in_turn(
                manager, sid, lambda: _exchange(service, manager, sid, body, messages, budget, key)
            ),
        )  # fmt: skip

    return api


async def _exchange(
    service: Service,
    manager: AsyncContextManager,
    sid: str,
    body: dict[str, Any],
    messages: list[dict[str, Any]],
    budget: int,
    key: str | None,
) -> Response:
    """Store the new turns, build the context, call upstream, store the reply.

    A retry (the same ``Idempotency-Key`` and body) stores nothing again, and
    is answered from the store if the reply was stored, refused (409) if the
    session moved on since its turn (``exchange.answered``); the key with
    another body is a 422, checked first.
    """
    model = body["model"]
    turn = await exchange.store_turns(service, manager, sid, messages, key, body, budget)
    if (reply := await exchange.answered(service, manager, sid, key, turn)) is not None:
        return _replay(reply, model, bool(body.get("stream")))
    context = await exchange.build(manager, sid, budget)
    evicted, recalled = service.metrics.observe_context(context.report, context.total_tokens)
    headers = exchange.context_headers(service, model, context.total_tokens, evicted, recalled)
    forward = {**_without_session(body), "messages": context.messages}
    ours = context.total_tokens + service.tokenizer(model).tools_tokens(body.get("tools"))
    if body.get("stream"):
        return await _stream(service, manager, sid, forward, key, headers, ours)
    status, data, raw = await service.upstream.complete(forward)
    if status < 400:
        await exchange.store_reply(manager, sid, data["choices"][0].get("message") or {}, key)
        await service.observe_usage(model, ours, data.get("usage"))
    return Response(raw, status, headers=headers, media_type="application/json")


def _replay(entry: Entry, model: str, stream: bool) -> Response:
    """A completed request answered again from the store, without calling upstream."""
    message = {k: v for k, v in entry.message.items() if k in ("role", "content", "tool_calls")}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    headers = {"X-Context-Replayed": "true"}
    base = {"id": f"chatcmpl-{entry.id}", "created": int(entry.created_at), "model": model}
    if not stream:
        choice = {"index": 0, "message": message, "finish_reason": finish}
        body = {**base, "object": "chat.completion", "choices": [choice]}
        return Response(orjson.dumps(body), headers=headers, media_type="application/json")
    chunk = {
        **base, "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": message, "finish_reason": finish}],
    }  # fmt: skip
    sse = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    return Response(sse, headers=headers, media_type="text/event-stream")


def _budget(service: Service, request: Request, body: dict[str, Any], model: str) -> int:
    reply = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    if not isinstance(reply, int) or reply < 0:
        raise APIError(400, "'max_tokens' must be a positive integer", param="max_tokens")
    return exchange.budget_of(service, request, model, reply, "max_tokens")


def _without_session(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    metadata = out.get("metadata")
    if isinstance(metadata, dict) and "session_id" in metadata:
        rest = {k: v for k, v in metadata.items() if k != "session_id"}
        if rest:
            out["metadata"] = rest
        else:
            del out["metadata"]
    return out


async def _stateless(
    service: Service, body: dict[str, Any], messages: list[dict[str, Any]], model: str, budget: int
) -> Response:
    tokenizer = service.tokenizer(model)
    try:
        if service.redactor is not None:  # nothing is stored: what goes upstream is masked
            messages = [service.redactor(dict(make_message(m))) for m in messages]
        for i, message in enumerate(messages):
            validate_message(message, where=f"messages[{i}]")
        tokens = tokenizer.count(messages, inputs.check_tools(body.get("tools")))
    except (CtxWindowError, ValueError) as exc:
        raise from_library(exc) from exc
    if tokens > budget:
        raise APIError(
            400, f"the messages have {tokens} prompt tokens, over the budget of {budget}",
            code="context_length_exceeded", param="messages",
        )  # fmt: skip
    forward = {**_without_session(body), "messages": messages}
    headers = exchange.context_headers(service, model, tokens)
    if body.get("stream"):
        reply = _with_usage(forward)
        upstream = await service.upstream.stream(forward)
        if upstream.status_code >= 400:
            return exchange.unchanged(upstream, headers)

        async def observe() -> None:
            await service.observe_usage(model, tokens, reply.usage)

        return HeldStream(
            service.upstream.relay(upstream, reply, observe), headers=headers,
            media_type="text/event-stream", streams=service.streams,
        )  # fmt: skip
    status, data, raw = await service.upstream.complete(forward)
    if status < 400:
        await service.observe_usage(model, tokens, data.get("usage"))
    return Response(raw, status, headers=headers, media_type="application/json")


def _with_usage(forward: dict[str, Any]) -> StreamedReply:
    """Ask the upstream for usage at the end of the stream (calibration reads it); if the
    client did not ask for it, its chunk is not passed on (``StreamedReply.hide_usage``)."""
    reply = StreamedReply()
    if "stream_options" not in forward:
        forward["stream_options"] = {"include_usage": True}
        reply.hide_usage = True
    return reply


async def _stream(
    service: Service,
    manager: AsyncContextManager,
    sid: str,
    forward: dict[str, Any],
    key: str | None,
    headers: dict[str, str],
    ours: int,
) -> Response:
    reply = _with_usage(forward)
    upstream = await service.upstream.stream(forward)
    if upstream.status_code >= 400:
        return exchange.unchanged(upstream, headers)

    async def store() -> None:
        if not reply.empty:
            await exchange.store_reply(manager, sid, reply.message(), key)
            await service.observe_usage(forward["model"], ours, reply.usage)

    def done() -> Awaitable[None]:
        response.storing = asyncio.ensure_future(store())
        return response.storing

    response = HeldStream(
        service.upstream.relay(upstream, reply, done), headers=headers,
        media_type="text/event-stream", streams=service.streams,
    )  # fmt: skip
    return response
