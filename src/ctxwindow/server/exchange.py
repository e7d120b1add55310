"""One exchange with the upstream: what the three protocol routes share.

Chat completions (chat.py), Responses (responses.py) and Messages
(messages.py) all hold the session for the whole exchange (``in_turn``),
store the new turns (``store_turns``), build (``build``), and store the reply
(``store_reply``) before the client gets it; a streamed reply is a
``HeldStream`` (``streams.py``) that releases the session once it is sent.
For the Responses and Messages routes, ``converse`` is the whole exchange:
the new turns (chat messages, see ``protocols``) are stored, the context is
built within the budget, converted to the request's protocol and sent
upstream, and the reply is converted back and stored (streamed: before the
stream's last event). What differs between those two protocols is a ``Wire``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from fastapi import Request, Response

from ctxwindow.context import AsyncContextManager, request_hash
from ctxwindow.errors import CtxWindowError, InvalidMessageError
from ctxwindow.messages import Entry, Message
from ctxwindow.policies import Context
from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.events import EventReply, relay
from ctxwindow.server.service import Service
from ctxwindow.server.streams import HeldStream

TRUNCATED = ("compressed", "evicted", "summarized")  # report states


class StreamedMessage(EventReply, Protocol):
    """An ``EventReply`` that adds up to the assistant message to store."""

    usage: dict[str, Any] | None  # as calibration reads it (``prompt_tokens``)

    def message(self) -> Message | None:
        """The reply (``content``, ``tool_calls``); None if there is nothing to store."""


@dataclass
class Wire:
    """What one protocol does in an exchange."""

    model: str
    path: str  # of the upstream, e.g. "responses"
    headers: dict[str, str]  # sent upstream
    # a built context and its stable prefix's length (``Report.stable_messages``) -> the
    # upstream body (Anthropic's marks the prefix's end with ``cache_control``)
    forward: Callable[[list[Message], int], dict[str, Any]]
    reply: Callable[[Any], Message | None]  # a non-streamed upstream body -> the reply
    usage: Callable[[Any], dict[str, Any] | None]  # ... -> its usage, for calibration
    answer: Callable[[Any], bytes]  # ... -> the client's body
    collector: Callable[[], StreamedMessage]  # for a streamed reply
    replay: Callable[[Entry, bool], Response]  # a stored reply, answered again
    stream: bool = False
    param: str = "messages"  # the body field of the new turns, named in errors
    check: Callable[[Context], None] | None = None  # refuses a built context
    extra: int = 0  # tokens sent beside the context: tools, a per-request system prompt
    # the upstream's answer (a body, or a stream's collector once it ended) -> metadata
    # stored with its reply (the Responses API keeps the response it answered)
    kept: Callable[[Any], dict[str, Any] | None] | None = None


def budget_of(service: Service, request: Request, model: str, reply: int, param: str) -> int:
    """The model's prompt budget with ``reply`` tokens reserved, narrowed by the header."""
    budget = service.budget(model, reply)
    header = inputs.context_max_tokens(request)
    if header is not None:
        budget = min(budget, header)
    if budget < 1:
        raise APIError(
            400, f"{param}={reply} leaves no room for the prompt in {model}'s budget",
            code="context_length_exceeded", param=param,
        )  # fmt: skip
    return budget


def less(budget: int, tokens: int, param: str, what: str) -> int:
    """The budget left beside ``tokens`` of ``what`` (tools, a system prompt) sent too."""
    if budget - tokens < 1:
        raise APIError(
            400, f"{what} alone take the whole budget of {budget} tokens",
            code="context_length_exceeded", param=param,
        )  # fmt: skip
    return budget - tokens


async def in_slot(
    service: Service, tenant: str, exchange: Callable[[], Awaitable[Response]]
) -> Response:
    """``exchange()`` holding one of the process's request slots for ``tenant``
    (``Service.slots``: a 429 when none is free) until its answer is sent."""
    release = service.slots.take(tenant)
    try:
        response = await exchange()
    except BaseException:
        release()
        raise
    if isinstance(response, HeldStream):
        response.slot = release
    else:
        release()
    return response


async def in_turn(
    manager: AsyncContextManager, sid: str, exchange: Callable[[], Awaitable[Response]]
) -> Response:
    """``exchange()`` holding the session; a stream holds it until it is sent."""
    async with AsyncExitStack() as turn:
        await turn.enter_async_context(manager.turn(sid))
        response = await exchange()
        if isinstance(response, HeldStream):
            response.release = turn.pop_all().aclose
            response.turn = (manager, sid)
            manager.hand_over(sid)
        return response


async def converse(
    service: Service,
    manager: AsyncContextManager,
    sid: str,
    wire: Wire,
    messages: list[Message],
    budget: int,
    key: str | None,
    body: dict[str, Any],
) -> Response:
    """Store the new turns, build, forward, store the reply (the session held by the caller)."""
    try:
        turn = await store_turns(service, manager, sid, messages, key, body, budget)
    except APIError as exc:
        raise _named(exc, wire.param) from exc
    if (reply := await answered(service, manager, sid, key, turn)) is not None:
        return wire.replay(reply, wire.stream)
    context = await build(manager, sid, budget)
    if wire.check is not None:
        wire.check(context)
    evicted, recalled = service.metrics.observe_context(context.report, context.total_tokens)
    ours = context.total_tokens + wire.extra
    headers = context_headers(service, wire.model, ours, evicted, recalled)
    forward = wire.forward(context.messages, context.report.stable_messages)
    if wire.stream:
        return await _stream(service, manager, sid, wire, forward, key, headers, ours)
    status, data, raw = await service.upstream.post(wire.path, forward, wire.headers)
    if status >= 400:
        return Response(raw, status, headers=headers, media_type="application/json")
    message = wire.reply(data)
    if message is None:
        raise service.upstream.malformed(f"upstream returned no {wire.path} reply")
    await store_reply(manager, sid, message, key, None if wire.kept is None else wire.kept(data))
    await service.observe_usage(wire.model, ours, wire.usage(data))
    return Response(wire.answer(data), headers=headers, media_type="application/json")


def _named(exc: APIError, param: str) -> APIError:
    """A refusal of the stored turns, naming the request's field rather than chat's."""
    if exc.param == "messages" and param != "messages":
        exc.param = param
    return exc


async def store_turns(
    service: Service,
    manager: AsyncContextManager,
    sid: str,
    messages: list[dict[str, Any]],
    key: str | None,
    body: dict[str, Any],
    budget: int,
) -> list[Entry]:
    """Store the request's messages, all or none, within the limit (a retry: nothing);
    the turn's entries (a retry: those its first attempt stored). Messages the
    build in ``budget`` could not send (a question too large for it even
    compressed, tool calls without their results) are refused before anything
    is stored: a refused request leaves nothing to retry over.

    The key is bound to the body, less how the answer is delivered (``stream``,
    ``stream_options``): the same request may be retried streamed or not. Each turn
    carries the request's model and budget (``metadata``: the inspector opens the
    session with them).
    """
    asked = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    metadata = {"model": body["model"], "budget": budget, **({"request": key} if key else {})}
    try:
        return await manager.extend(
            sid, messages, metadata=metadata, idempotency_key=key,
            max_messages=service.settings.max_messages_per_session,
            request_hash=request_hash(asked) if key else None, max_tokens=budget,
        )  # fmt: skip
    except CtxWindowError as exc:
        raise from_library(exc) from exc


async def answered(
    service: Service, manager: AsyncContextManager, sid: str, key: str | None, turn: list[Entry]
) -> Entry | None:
    """The stored reply a retry of ``key`` is answered with; None when there is none and
    the request's ``turn`` still ends the session (the exchange goes on).

    A retry whose turn was never answered, in a session that has moved on since
    (another turn was stored after it, answered or not), is refused: its answer
    would follow other turns, and be built on what was said after its question.
    The 409 asks not to be retried (``x-should-retry``, read by the OpenAI and
    Anthropic SDKs); the question stays stored, unanswered.
    """
    if key is None or not turn:
        return None
    newest = await manager.last_seq(sid)  # the window's, caught up: no store read
    if newest == turn[-1].seq:
        return None  # the turn ends the session: no reply to it is stored (a fresh request)
    reply = await service.store.replayed(sid, f"{key}:reply")
    if reply:
        return reply[0]
    if newest > turn[-1].seq:
        raise APIError(
            409, f"the request with this Idempotency-Key was never answered, and the session"
            f" has moved on since (its turn ends at seq {turn[-1].seq}, the session at seq"
            f" {newest}): an answer now would not follow its question. Send the question"
            " again as a new turn, with a new key",
            code="idempotency_turn_superseded", param="Idempotency-Key",
            headers={"x-should-retry": "false"},
        )  # fmt: skip
    return None


async def build(manager: AsyncContextManager, sid: str, budget: int) -> Context:
    try:
        return await manager.build(sid, max_tokens=budget)
    except CtxWindowError as exc:
        raise from_library(exc) from exc


async def store_reply(
    manager: AsyncContextManager,
    sid: str,
    message: dict[str, Any],
    key: str | None,
    kept: dict[str, Any] | None = None,
) -> None:
    """Store the upstream's reply (``kept`` in its metadata too); one that is not a valid
    assistant message is a 502.

    An empty reply (no text, no tool calls) is passed on but not stored, streamed
    or not: the turn stays unanswered, as after a failure, and a later context
    holds no empty assistant turn (which Anthropic's API refuses).
    """
    reply: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        reply["tool_calls"] = message["tool_calls"]
    elif reply["content"] in (None, "", []):
        return
    metadata = {**({"request": key} if key else {}), **(kept or {})}
    try:
        await manager.add(
            sid, reply, metadata=metadata or None, idempotency_key=f"{key}:reply" if key else None
        )
    except InvalidMessageError as exc:
        raise APIError(
            502, f"upstream returned an invalid reply: {exc}", code="bad_gateway"
        ) from exc
    except CtxWindowError as exc:
        raise from_library(exc) from exc


def unchanged(upstream: httpx.Response, headers: dict[str, str]) -> Response:
    """An upstream error answer (already read), passed on as it came."""
    media = upstream.headers.get("content-type", "application/json")
    return Response(upstream.content, upstream.status_code, headers=headers, media_type=media)


def context_headers(
    service: Service, model: str, tokens: int, evicted: int = 0, recalled: int = 0
) -> dict[str, str]:
    return {
        "X-Context-Tokens": str(tokens),
        "X-Context-Evicted": str(evicted),
        "X-Context-Recalled": str(recalled),
        "X-Context-Estimated": "false" if service.tokenizer(model).exact else "true",
    }


async def _stream(
    service: Service,
    manager: AsyncContextManager,
    sid: str,
    wire: Wire,
    forward: dict[str, Any],
    key: str | None,
    headers: dict[str, str],
    ours: int,
) -> Response:
    upstream = await service.upstream.open(wire.path, forward, wire.headers)
    if upstream.status_code >= 400:
        return unchanged(upstream, headers)
    collector = wire.collector()

    async def store() -> None:
        message = collector.message()
        if message is not None:
            kept = None if wire.kept is None else wire.kept(collector)
            await store_reply(manager, sid, message, key, kept)
            await service.observe_usage(wire.model, ours, collector.usage)

    def done() -> Awaitable[None]:
        response.storing = asyncio.ensure_future(store())
        return response.storing

    response = HeldStream(
        relay(upstream, collector, done, service.upstream.broken), headers=headers,
        media_type="text/event-stream", streams=service.streams,
    )  # fmt: skip
    return response


async def stateless(service: Service, wire: Wire, forward: dict[str, Any], tokens: int) -> Response:
    """``forward`` sent as it is (already checked against the budget), nothing stored."""
    headers = context_headers(service, wire.model, tokens)
    if wire.stream:
        upstream = await service.upstream.open(wire.path, forward, wire.headers)
        if upstream.status_code >= 400:
            return unchanged(upstream, headers)
        collector = wire.collector()

        async def observe() -> None:
            await service.observe_usage(wire.model, tokens, collector.usage)

        return HeldStream(
            relay(upstream, collector, observe, service.upstream.broken), headers=headers,
            media_type="text/event-stream", streams=service.streams,
        )  # fmt: skip
    status, data, raw = await service.upstream.post(wire.path, forward, wire.headers)
    if status >= 400:
        return Response(raw, status, headers=headers, media_type="application/json")
    if wire.reply(data) is None:
        raise service.upstream.malformed(f"upstream returned no {wire.path} reply")
    await service.observe_usage(wire.model, tokens, wire.usage(data))
    return Response(wire.answer(data), headers=headers, media_type="application/json")


def over_budget(tokens: int, budget: int, param: str) -> APIError:
    return APIError(
        400, f"the request has {tokens} prompt tokens, over the budget of {budget}",
        code="context_length_exceeded", param=param,
    )  # fmt: skip


def redacted(service: Service, messages: list[Message]) -> list[Message]:
    """``messages`` masked by the service's redactor (for what is sent but never stored)."""
    if service.redactor is None:
        return messages
    return [service.redactor(dict(m)) for m in messages]


def truncated(context: Context) -> bool:
    """Whether the built context leaves out or shortens any of the session's history."""
    report = context.report
    return report.evicted_entries > 0 or any(d.state in TRUNCATED for d in report.decisions)
