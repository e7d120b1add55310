"""``POST /v1/responses``: the OpenAI Responses API over a session's context.

The session is named by ``conversation`` (an id, or ``{"id": ...}``), by
``previous_response_id`` (a response id of this service encodes its session:
``resp_`` + 24 random hex digits + the session id in URL-safe base64), or by
``X-Session-Id``. A request naming none starts a new session (its id is in
the response id, so ``previous_response_id`` continues it), unless it says
``store: false``: then it passes through statelessly, checked against the
budget. Sessions are tenant-scoped like every other (``scoped``).

``truncation: "auto"`` lets ctxwindow's window choose what of the session
goes; ``"disabled"`` (the default, as OpenAI's) refuses with a 400
``context_length_exceeded`` a request whose session does not fit whole.
``instructions`` are this request's system prompt: sent, counted, not stored.
The upstream gets the whole built context as ``input`` and neither
``previous_response_id`` nor ``conversation``. The response a session's
request was answered with is kept in its reply's metadata (``KEPT``; masked
as the reply is when the redactor runs before storage): a retry of its
``Idempotency-Key`` answers it again, and ``GET /v1/responses/{id}`` reads it
(``stored_responses.py``).
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request, Response

from ctxwindow.context import AsyncContextManager
from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry, Message, validate_message
from ctxwindow.policies import Context
from ctxwindow.server import exchange, inputs
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.openapi import json_body
from ctxwindow.server.protocols import (
    chat_text,
    from_responses,
    output_message,
    responses_reply,
    responses_usage,
    to_responses,
)
from ctxwindow.server.service import Service, read_json
from ctxwindow.server.tenants import scoped
from ctxwindow.server.upstream import StreamFault, error_event
from ctxwindow.stores.base.checks import MAX_COUNT, MAX_DEPTH, find_unstorable
from ctxwindow.tokens.chat import ChatTokenizer

PREFIX = "resp_"
NONCE = 24  # hex digits of randomness in a response id, before the session
KEPT = "response"  # the key of a reply's metadata that holds the response it was sent in
# Keys of a response whose values are names, not text: never masked.
STRUCTURE = frozenset(
    {"id", "object", "type", "status", "role", "model", "name", "call_id", "encrypted_content",
     "previous_response_id"}
)  # fmt: skip

REQUEST_SCHEMA = json_body({
    "type": "object",
    "required": ["model", "input"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "input": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "minItems": 1, "items": {"type": "object"}},
            ]
        },
        "instructions": {"type": ["string", "null"]},
        "previous_response_id": {"type": ["string", "null"]},
        "conversation": {
            "anyOf": [{"type": "string"}, {"type": "object"}, {"type": "null"}]
        },
        "truncation": {"enum": ["auto", "disabled", None]},
        "store": {"type": ["boolean", "null"]},
        "stream": {"type": ["boolean", "null"]},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 0},
        "tools": {"type": "array", "items": {"type": "object"}},
        "metadata": {"type": ["object", "null"]},
    },
    "additionalProperties": True,
})  # fmt: skip


def router(service: Service, tenant: Any) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/responses", openapi_extra=REQUEST_SCHEMA, tags=["responses"])
    async def responses(request: Request, tenant: str = Depends(tenant)) -> Response:
        """A response over the session's context (``conversation``, ``previous_response_id``
        or ``X-Session-Id``)."""
        body = await read_json(request, service.settings.max_request_bytes)
        _check(body)
        model = body["model"]
        if service.model(model).estimated:
            await service.calibration.load()
        tools = inputs.check_tools(body.get("tools"))
        messages = from_responses(body.get("input"), service.settings.max_message_chars)
        tokenizer = service.tokenizer(model)
        instructions = _instructions(service, body.get("instructions"))
        extra = tokenizer.tools_tokens(tools) + _system_tokens(service, model, instructions)
        reply = body.get("max_output_tokens") or 0
        budget = exchange.budget_of(service, request, model, reply, "max_output_tokens")
        named = _session(request, body, tenant)
        if named is None and body.get("store") is False:
            return await exchange.in_slot(
                service, tenant,
                lambda: _stateless(service, body, messages, instructions, budget, extra),
            )  # fmt: skip
        if named is not None and body.get("store") is False:
            raise APIError(
                400, "store: false is for stateless requests; ctxwindow keeps every turn of a"
                f" session, and this request names one ({named[2]})", param="store",
            )  # fmt: skip
        sid, session_id, _ = named or (*_new_session(tenant), "")
        if body.get("previous_response_id") is not None and not await service.session_size(sid):
            raise _not_found(body["previous_response_id"])
        room = exchange.less(budget, extra, "instructions", "the instructions and tools")
        manager = service.manager(model)
        wire = _wire(service, body, instructions, response_id(session_id), room, extra)
        key = inputs.idempotency_key(request)

        async def exchanged() -> Response:
            if wire.check is not None:
                await _fits(manager, sid, messages, room, tokenizer)
            return await exchange.converse(service, manager, sid, wire, messages, room, key, body)

        return await exchange.in_slot(
            service, tenant, lambda: exchange.in_turn(manager, sid, exchanged)
        )

    return api


def _check(body: dict[str, Any]) -> None:
    """The fields the route reads, of the types it reads (a 400 naming the field)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise APIError(400, "'model' must be a model name", param="model")
    for name in ("stream", "store"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise _invalid(name, "must be true or false")
    value = body.get("max_output_tokens")
    if value is not None and (type(value) is not int or not 0 <= value <= MAX_COUNT):
        raise _invalid("max_output_tokens", "must be a whole number from 0 to 2**63 - 1")
    if body.get("truncation") not in (None, "auto", "disabled"):
        raise _invalid("truncation", 'must be "auto" or "disabled"')
    for name in ("instructions", "previous_response_id"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise _invalid(name, "must be a string")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise _invalid("metadata", "must be an object")


def _invalid(name: str, what: str) -> APIError:
    return APIError(400, f"'{name}' {what}", code="invalid_value", param=name)


def _instructions(service: Service, instructions: str | None) -> str | None:
    """The request's instructions, masked when a redactor runs (they are sent, not stored)."""
    if instructions is None or service.redactor is None:
        return instructions
    return chat_text(service.redactor({"role": "system", "content": instructions})["content"])


def _system_tokens(service: Service, model: str, text: str | None) -> int:
    if not text:
        return 0
    return service.tokenizer(model).message_tokens({"role": "system", "content": text})


# --- sessions and response ids -----------------------------------------------------------


def response_id(session_id: str) -> str:
    """A new response id of the session ``session_id`` (the client's id, unscoped)."""
    encoded = base64.urlsafe_b64encode(session_id.encode()).rstrip(b"=").decode()
    return f"{PREFIX}{secrets.token_hex(NONCE // 2)}{encoded}"


def session_of(response: str) -> str:
    """The session id a response id of this service encodes; a 400 for any other id."""
    session = session_in(response)
    if session is None:
        raise _not_found(response)
    return session


def session_in(response: str) -> str | None:
    """The session id a response id of this service encodes; None for any other id."""
    encoded = response[len(PREFIX) + NONCE :]
    if not response.startswith(PREFIX) or not encoded:
        return None
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, ValueError):
        return None


def _not_found(response: str) -> APIError:
    shown = response if len(response) <= 80 else response[:80] + "…"
    return APIError(
        400, f"previous response {shown!r} not found", code="previous_response_not_found",
        param="previous_response_id",
    )  # fmt: skip


def _session(request: Request, body: dict[str, Any], tenant: str) -> tuple[str, str, str] | None:
    """(scoped id, the client's id, the field that named it) of the request's session."""
    conversation = _conversation(body.get("conversation"))
    previous = body.get("previous_response_id")
    if conversation is not None and previous is not None:
        raise APIError(
            400, "send either conversation or previous_response_id, not both",
            param="previous_response_id",
        )  # fmt: skip
    named = [
        (value, param)
        for value, param in (
            (inputs.header_text(request, "X-Session-Id"), "X-Session-Id"),
            (conversation, "conversation"),
            (None if previous is None else session_of(previous), "previous_response_id"),
        )
        if value is not None
    ]
    found = [(scoped(tenant, value, param=param), value, param) for value, param in named]
    if len({sid for sid, _, _ in found}) > 1:
        raise APIError(
            400, f"{found[1][2]} names another session than {found[0][2]}", param=found[1][2]
        )
    return found[0] if found else None


def _conversation(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("id")
        if not isinstance(value, str):
            raise _invalid("conversation.id", "must be a string")
    if value is not None and not isinstance(value, str):
        raise _invalid("conversation", "must be an id or {'id': ...}")
    return value


def _new_session(tenant: str) -> tuple[str, str]:
    """A session for a request that names none: an id nobody can guess."""
    session_id = f"resp-{uuid.uuid4().hex}"
    return scoped(tenant, session_id), session_id


# --- the exchange ------------------------------------------------------------------------


def _wire(
    service: Service,
    body: dict[str, Any],
    instructions: str | None,
    rid: str,
    budget: int,
    extra: int,
) -> exchange.Wire:
    model = body["model"]
    headers = service.upstream.headers()

    def forward(context: list[Message], stable: int = 0) -> dict[str, Any]:
        out = _upstream_body(body, instructions)
        out["input"] = to_responses(context)
        return out

    def ours(response: dict[str, Any]) -> dict[str, Any]:
        return _ours(response, rid, body)

    def check(context: Context) -> None:
        if exchange.truncated(context):
            raise _does_not_fit(budget)

    def replay(entry: Entry, stream: bool) -> Response:
        kept = entry.metadata.get(KEPT)
        response = kept if isinstance(kept, dict) else ours(_replayed(entry, model))
        return _replay(entry, stream, response)

    return exchange.Wire(
        model=model, path="responses", headers=headers, forward=forward, reply=responses_reply,
        usage=_usage, answer=lambda data: orjson.dumps(ours(data)),
        collector=lambda: ResponsesStream(ours), replay=replay,
        stream=bool(body.get("stream")), param="input",
        check=None if body.get("truncation") == "auto" else check,
        extra=extra, kept=_keeper(service, ours),
    )  # fmt: skip


def _keeper(
    service: Service, ours: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[[Any], dict[str, Any] | None]:
    """What a reply's metadata keeps of the upstream's answer: the response the client got
    (a stream's: its last event's, ``ResponsesStream.answered``), masked as the reply is.
    A response no store could keep (nested past its limit) is not kept: the reply is."""

    def kept(answer: Any) -> dict[str, Any] | None:
        response = answer.answered() if isinstance(answer, ResponsesStream) else answer
        if not isinstance(response, dict):
            return None
        response = ours(response)
        if find_unstorable(response, MAX_DEPTH - 1) is not None:
            return None
        return {KEPT: _masked(service, response)}

    return kept


def _masked(service: Service, response: dict[str, Any]) -> dict[str, Any]:
    """``response`` as the store may keep it: every text in it masked when the redactor runs
    before storage (``redact`` other than ``upstream``), as the reply's message is."""
    if service.redactor is None or service.settings.redact == "upstream":
        return response
    redact = getattr(service.redactor, "uncounted", service.redactor)  # counted in the reply

    def masked(value: Any) -> Any:
        if isinstance(value, str):
            return chat_text(redact({"role": "assistant", "content": value})["content"])
        if isinstance(value, list):
            return [masked(item) for item in value]
        if isinstance(value, dict):
            return {k: v if k in STRUCTURE else masked(v) for k, v in value.items()}
        return value

    kept: dict[str, Any] = masked(response)
    return kept


def _upstream_body(body: dict[str, Any], instructions: str | None) -> dict[str, Any]:
    """The request as the upstream gets it: no state of its own to refer to."""
    out = {k: v for k, v in body.items() if k not in ("previous_response_id", "conversation")}
    if instructions is not None:
        out["instructions"] = instructions
    return out


def _ours(response: dict[str, Any], rid: str, body: dict[str, Any]) -> dict[str, Any]:
    """The upstream's response as the client's: our id, its previous response, conversation."""
    if not isinstance(response, dict):
        return response
    out = {**response, "id": rid, "previous_response_id": body.get("previous_response_id")}
    conversation = body.get("conversation")
    if conversation is not None:
        out["conversation"] = (
            conversation if isinstance(conversation, dict) else {"id": conversation}
        )
    return out


def _usage(data: Any) -> dict[str, Any] | None:
    return responses_usage(data.get("usage")) if isinstance(data, dict) else None


def _does_not_fit(budget: int) -> APIError:
    return APIError(
        400, f"the conversation does not fit in the budget of {budget} tokens; send"
        ' truncation: "auto" to let ctxwindow choose what of it goes',
        code="context_length_exceeded", param="input",
    )  # fmt: skip


async def _fits(
    manager: AsyncContextManager,
    sid: str,
    messages: list[Message],
    budget: int,
    tokenizer: ChatTokenizer,
) -> None:
    """With truncation disabled, refuse before storing anything what cannot fit whole."""
    context = await exchange.build(manager, sid, budget)
    if exchange.truncated(context):
        raise _does_not_fit(budget)
    if context.total_tokens + sum(tokenizer.message_tokens(m) for m in messages) > budget:
        raise _does_not_fit(budget)


async def _stateless(
    service: Service,
    body: dict[str, Any],
    messages: list[Message],
    instructions: str | None,
    budget: int,
    extra: int,
) -> Response:
    model = body["model"]
    sent = exchange.redacted(service, messages)
    try:
        for i, message in enumerate(sent):
            validate_message(message, where=f"input[{i}]")
        tokens = service.tokenizer(model).count(sent) + extra
    except (CtxWindowError, ValueError) as exc:
        raise exchange._named(from_library(exc), "input") from exc
    if tokens > budget:
        raise exchange.over_budget(tokens, budget, "input")
    forward = _upstream_body(body, instructions)
    if service.redactor is not None:
        forward["input"] = to_responses(sent)
    rid = f"{PREFIX}{secrets.token_hex(NONCE // 2)}"  # of no session: nothing to continue
    wire = _wire(service, body, instructions, rid, budget, extra)
    return await exchange.stateless(service, wire, forward, tokens)


class ResponsesStream:
    """The reply a Responses event stream adds up to; its events carry our response id."""

    def __init__(self, ours: Any) -> None:
        self.ours = ours
        self.items: list[Any] = []  # from response.output_item.done
        self.final: dict[str, Any] | None = None  # the response of the last event
        self.usage: dict[str, Any] | None = None

    def add(self, event: dict[str, Any]) -> bytes | None:
        kind = event.get("type")
        if kind in ("error", "response.failed"):
            raise StreamFault("status", f"the upstream stream reported an error: {_said(event)}")
        if kind == "response.output_item.done":
            self.items.append(event.get("item"))
        response = event.get("response")
        if not isinstance(response, dict):
            return None
        if self.ends(event):
            self.final = response
            self.usage = _usage(response)
        return b"data: " + orjson.dumps({**event, "response": self.ours(response)})

    def ends(self, event: dict[str, Any]) -> bool:
        return event.get("type") in ("response.completed", "response.incomplete")

    def answered(self) -> dict[str, Any] | None:
        """The response of the last event, its ``output`` the items done if it has none."""
        final = self.final
        if final is None or final.get("output") or not self.items:
            return final
        return {**final, "output": self.items}

    def message(self) -> Message | None:
        output = (self.final or {}).get("output")
        message = output_message(output if isinstance(output, list) and output else self.items)
        if message is None:
            raise StreamFault("malformed", "the upstream stream sent a malformed output item")
        if message["content"] is None and not message.get("tool_calls"):
            return None
        return message

    def error_event(self, error: APIError) -> bytes:
        return error_event(error)


def _said(event: dict[str, Any]) -> Any:
    """The message of an ``error`` or ``response.failed`` event."""
    response = event.get("response")
    error = response.get("error") if isinstance(response, dict) else event
    return error.get("message") if isinstance(error, dict) else error


def _replayed(entry: Entry, model: str) -> dict[str, Any]:
    """The stored reply of a retried request as a response body."""
    message = entry.message
    output: list[dict[str, Any]] = []
    if text := chat_text(message.get("content")):
        output.append(
            {"type": "message", "id": f"msg_{entry.id}", "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "text": text, "annotations": []}]}
        )  # fmt: skip
    for call in message.get("tool_calls") or ():
        output.append(
            {"type": "function_call", "id": f"fc_{call['id']}", "call_id": call["id"],
             "name": call["function"]["name"], "arguments": call["function"]["arguments"],
             "status": "completed"}
        )  # fmt: skip
    return {
        "object": "response", "created_at": int(entry.created_at or time.time()),
        "model": model, "status": "completed", "output": output, "error": None,
        "incomplete_details": None, "usage": None,
    }  # fmt: skip


def _replay(entry: Entry, stream: bool, response: dict[str, Any]) -> Response:
    headers = {"X-Context-Replayed": "true"}
    if not stream:
        return Response(orjson.dumps(response), headers=headers, media_type="application/json")
    started = {**response, "status": "in_progress", "output": []}
    events = [("response.created", started), ("response.completed", response)]
    sse = b"".join(
        b"event: " + kind.encode() + b"\ndata: "
        + orjson.dumps({"type": kind, "sequence_number": n, "response": body}) + b"\n\n"
        for n, (kind, body) in enumerate(events)
    )  # fmt: skip
    return Response(sse, headers=headers, media_type="text/event-stream")
