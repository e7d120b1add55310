"""One exchange with the upstream, for every protocol (``protocols/``).

A route's request is read by its protocol's ``Adapter`` (``serve``), then
the exchange holds a request slot and the session for the whole exchange
(``in_slot``, ``in_turn``), stores the new turns (``store_turns``, all or
none, once per ``Idempotency-Key``), answers a retry from the store
(``answered``), builds the context within the budget, sends it upstream as
the protocol's body, and stores the reply before the client gets it
(streamed: before the stream's last event, through the one relay in
``sse.py``). A streamed reply is a ``HeldStream`` (``streams.py``) that
releases the session once it is sent. Without a session the request passes
through, checked against the budget (``stateless``), and nothing is stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx
from fastapi import Request, Response

from ctxwindow.context import AsyncContextManager, request_hash
from ctxwindow.errors import CtxWindowError, InvalidMessageError
from ctxwindow.messages import Entry, Message, validate_message
from ctxwindow.policies import Context
from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.protocols.base import Adapter
from ctxwindow.server.service import Service
from ctxwindow.server.sse import relay_response
from ctxwindow.server.streams import HeldStream

logger = logging.getLogger("ctxwindow.server")


async def serve(service: Service, adapter: Adapter, tenant: str) -> Response:
    """The exchange of one request, read by its protocol's ``adapter``."""
    if service.model(adapter.model).estimated:  # its budget depends on the ratios kept
        await service.calibration.load()
    request = adapter.request
    budget = budget_of(service, request, adapter.model, adapter.reply_tokens, adapter.reply_param)
    sid = await adapter.session(tenant)
    if sid is None:
        return await in_slot(service, tenant, lambda: stateless(service, adapter, budget))
    room = less(budget, adapter.extra, *adapter.beside)
    manager = service.manager(adapter.model)
    key = inputs.idempotency_key(request)

    async def exchanged() -> Response:
        if adapter.previews:
            adapter.admit(await build(manager, sid, room), room)
        return await converse(service, manager, sid, adapter, room, key)

    return await in_slot(service, tenant, lambda: in_turn(manager, sid, exchanged))


async def converse(
    service: Service,
    manager: AsyncContextManager,
    sid: str,
    adapter: Adapter,
    budget: int,
    key: str | None,
) -> Response:
    """Store the new turns, build, forward, store the reply (the session held by the caller).

    A retry (the same ``Idempotency-Key`` and body) stores nothing again, and
    is answered from the store if the reply was stored, refused (409) if the
    session moved on since its turn (``answered``); the key with another body
    is a 422, checked first. A build that refuses the turn after it was stored
    (admission let it in, but adding it grew the rolling summary past the room)
    takes it back out (``withdraw``): a refused request leaves nothing stored (a
    retry's too: its turn, stored by the first attempt, still ends the session).
    Storing the turn is the exchange's first store call: it also checks that the
    session's window is current (``append_after``).
    """
    try:
        turn = await store_turns(service, manager, sid, adapter.turns, key, adapter.body, budget)
    except APIError as exc:
        raise adapter.named(exc) from exc
    if (stored := await answered(service, manager, sid, key, turn)) is not None:
        return adapter.replay(stored)
    try:
        context = await build(manager, sid, budget)
        adapter.check(context, budget)
    except APIError:
        if turn:  # it ends the session (``answered``)
            await withdraw(manager, sid, turn[0].seq - 1)
        raise
    evicted, recalled = service.metrics.observe_context(context.report, context.total_tokens)
    ours = context.total_tokens + adapter.extra
    headers = context_headers(service, adapter.model, ours, evicted, recalled)

    async def settle(answer: Any) -> None:
        message = answer.message() if adapter.stream else adapter.reply(answer)
        if message is not None:
            await store_reply(manager, sid, message, key, adapter.kept(answer))
            usage = answer.usage if adapter.stream else adapter.usage(answer)
            await service.observe_usage(adapter.model, ours, usage)

    forward = adapter.forward(context.messages, context.report.stable_messages)
    return await _send(service, adapter, forward, headers, settle)


async def stateless(service: Service, adapter: Adapter, budget: int) -> Response:
    """The request sent as it is, checked against the budget (its turns masked when a
    redactor runs: nothing is stored, what goes upstream is); nothing stored."""
    try:
        for i, message in enumerate(adapter.turns):
            validate_message(message, where=f"{adapter.param}[{i}]")
        sent = redacted(service, adapter.turns)
        tokens = adapter.count(sent)
    except (CtxWindowError, ValueError) as exc:
        raise adapter.refused(exc) from exc
    if tokens > budget:
        raise over_budget(tokens, budget, adapter.param)
    headers = context_headers(service, adapter.model, tokens)

    async def settle(answer: Any) -> None:
        usage = answer.usage if adapter.stream else adapter.usage(answer)
        await service.observe_usage(adapter.model, tokens, usage)

    return await _send(service, adapter, adapter.passed_through(sent), headers, settle)


async def _send(
    service: Service,
    adapter: Adapter,
    forward: dict[str, Any],
    headers: dict[str, str],
    settle: Callable[[Any], Awaitable[None]],
) -> Response:
    """``forward`` sent upstream, and its answer for the client; ``settle(answer)`` (the
    upstream's body, or a stream's collector) runs once the reply is whole: before a
    stream's last event is passed on. An upstream 4xx is passed on as it came."""
    path, upstream = adapter.upstream_path, service.upstream
    if not adapter.stream:
        status, data, raw = await upstream.post(path, forward, adapter.headers)
        if status >= 400:
            return Response(raw, status, headers=headers, media_type="application/json")
        if adapter.reply(data) is None:
            raise upstream.malformed(f"upstream returned no {path} reply")
        await settle(data)
        return Response(adapter.answer(data, raw), headers=headers, media_type="application/json")
    opened = await upstream.open(path, forward, adapter.headers)
    if opened.status_code >= 400:
        return unchanged(opened, headers)
    collector = adapter.collector()

    def finish() -> Awaitable[None]:
        response.storing = asyncio.ensure_future(settle(collector))
        return response.storing

    response = HeldStream(
        relay_response(opened, collector, finish, upstream.broken), headers=headers,
        media_type="text/event-stream", streams=service.streams,
    )  # fmt: skip
    return response


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


async def withdraw(manager: AsyncContextManager, sid: str, newest: int) -> None:
    """Remove the request's turn: the entries after seq ``newest`` (the session held
    throughout).

    The window is reloaded and the archive indexes the session again (``truncate``): a
    rare path, a question within a few tokens of the room. Should the store fail, the
    turn stays, unanswered, and the refusal still goes out.
    """
    try:
        await manager.truncate(sid, newest)
    except CtxWindowError:
        logger.exception("could not remove the refused turn of session %r", sid)


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
        if message.get("thinking"):  # Anthropic's, needed back unchanged for the tool loop
            reply["thinking"] = message["thinking"]
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
