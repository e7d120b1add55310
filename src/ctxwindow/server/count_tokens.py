"""``POST /v1/messages/count_tokens``: Anthropic's token count, in the service's counts.

The answer, ``{"input_tokens": N}``, is what ``X-Context-Tokens`` of the same
request to ``POST /v1/messages`` would say; nothing is stored, nothing goes
upstream. Without ``X-Session-Id``: the request as given (masked when a
redactor runs, as it would be sent). With it: the context the service would
build for it, the session's window within the budget with the new turns last
(``AsyncContextManager.preview``). Both count ``system``, the tools and the
few tokens kept free for the ``(earlier turns left out)`` turn. Claude's
counts are estimates (``X-Context-Estimated: true``): Anthropic publishes no
tokenizer. ``max_tokens`` is optional; given, the budget keeps room for it.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from ctxwindow.context import AsyncContextManager
from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Message, validate_message
from ctxwindow.policies.explain import Report
from ctxwindow.server import exchange, inputs
from ctxwindow.server.errors import from_library
from ctxwindow.server.inputs import read_json
from ctxwindow.server.protocols.anthropic import beside, body_schema, check, counted, keyed_tenant
from ctxwindow.server.protocols.blocks import from_anthropic
from ctxwindow.server.service import Service
from ctxwindow.server.tenants import scoped

REQUEST_SCHEMA = body_schema(["model", "messages"])


def router(service: Service) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/messages/count_tokens", openapi_extra=REQUEST_SCHEMA, tags=["messages"])
    async def count_tokens(
        request: Request, tenant: str = Depends(keyed_tenant(service))
    ) -> Response:
        """The prompt tokens of a Messages request, as ``X-Context-Tokens`` of the same
        request would say (with ``X-Session-Id``: of the context built for it)."""
        body = await read_json(request, service.settings.max_request_bytes)
        check(body, max_tokens=False)
        model = body["model"]
        if service.model(model).estimated:
            await service.calibration.load()
        turns = from_anthropic(body.get("messages"), service.settings.max_message_chars)
        _, extra = beside(service, body)
        session_id = inputs.header_text(request, "X-Session-Id")
        if session_id is None:
            sent = exchange.redacted(service, turns)
            return _answer(service, model, counted(service, model, sent, extra))
        reply = body.get("max_tokens") or 0
        budget = exchange.budget_of(service, request, model, reply, "max_tokens")
        room = exchange.less(budget, extra, "system", "the system prompt and tools")
        sid = scoped(tenant, session_id)
        manager = service.manager(model)
        tokens, report = await _previewed(service, manager, model, sid, turns, room)
        return _answer(service, model, tokens + extra, report)

    return api


async def _previewed(
    service: Service,
    manager: AsyncContextManager,
    model: str,
    sid: str,
    turns: list[Message],
    room: int,
) -> tuple[int, Report]:
    """The tokens and report of the context the session would be sent with ``turns`` added.

    One new turn (a question) is previewed as ``build`` would send it (compressed
    if it must be, recall searched by it); several (tool results, a batch) are
    counted whole beside the session's context in the room they leave.
    """
    try:
        if len(turns) == 1 and turns[0]["role"] in ("user", "assistant"):
            context = await manager.preview(sid, turns[0], max_tokens=room)
            return context.total_tokens, context.report
        sent = exchange.redacted(service, turns)
        for i, message in enumerate(sent):
            validate_message(message, where=f"messages[{i}]")
        tokenizer = service.tokenizer(model)
        new = sum(tokenizer.message_tokens(message) for message in sent)
        if room - new < 1:
            raise exchange.over_budget(new, room, "messages")
        built = await manager.build(sid, max_tokens=room - new, sent=False)
    except (CtxWindowError, ValueError) as exc:
        raise from_library(exc) from exc
    return built.total_tokens + new, built.report


def _answer(service: Service, model: str, tokens: int, report: Report | None = None) -> Response:
    evicted = 0 if report is None else report.evicted_entries
    recalled = 0 if report is None else report.recalled_entries
    headers = exchange.context_headers(service, model, tokens, evicted, recalled)
    return JSONResponse({"input_tokens": tokens}, headers=headers)
