"""The OpenAI Responses API (``POST /v1/responses``) over a session's context.

The session is named as ``response_ids`` says; a request that names none and
says ``store: false`` passes through statelessly, checked against the budget.
Sessions are tenant-scoped like every other (``scoped``).

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

import secrets
import time
from typing import Any

import orjson
from fastapi import Request, Response

from ctxwindow.messages import Entry, Message
from ctxwindow.policies import Context
from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError
from ctxwindow.server.openapi import object_body
from ctxwindow.server.protocols.base import Adapter
from ctxwindow.server.protocols.items import (
    from_responses,
    output_message,
    responses_reply,
    responses_usage,
    to_responses,
)
from ctxwindow.server.protocols.response_ids import (
    NONCE,
    PREFIX,
    invalid,
    named_session,
    new_session,
    not_found,
    response_id,
)
from ctxwindow.server.protocols.wire import chat_text
from ctxwindow.server.service import Service
from ctxwindow.server.sse import StreamFault, openai_error_event
from ctxwindow.stores.base.checks import MAX_COUNT, MAX_DEPTH, find_unstorable

KEPT = "response"  # the key of a reply's metadata that holds the response it was sent in
# Keys of a response whose values are names, not text: never masked.
STRUCTURE = frozenset(
    {"id", "object", "type", "status", "role", "model", "name", "call_id", "encrypted_content",
     "previous_response_id"}
)  # fmt: skip


class Responses(Adapter):
    """A response over the session's context (``conversation``, ``previous_response_id``
    or ``X-Session-Id``)."""

    path = "/v1/responses"
    upstream_path = "responses"
    schema = object_body(
        ["model", "input"],
        {
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
    )  # fmt: skip
    param = "input"
    reply_param = "max_output_tokens"
    beside = ("instructions", "the instructions and tools")

    def __init__(self, service: Service, request: Request, body: dict[str, Any]) -> None:
        _check(body)
        super().__init__(service, request, body)
        tools = inputs.check_tools(body.get("tools"))
        self.turns = from_responses(body.get("input"), service.settings.max_message_chars)
        self.instructions = _instructions(service, body.get("instructions"))
        tokenizer = service.tokenizer(self.model)
        self.extra = tokenizer.tools_tokens(tools) + _system_tokens(
            service, self.model, self.instructions
        )
        self.reply_tokens = body.get("max_output_tokens") or 0
        self.headers = service.upstream.headers()
        self.previews = body.get("truncation") != "auto"
        self.rid = f"{PREFIX}{secrets.token_hex(NONCE // 2)}"  # of no session, until named

    async def session(self, tenant: str) -> str | None:
        named = named_session(self.request, self.body, tenant)
        stored = self.body.get("store") is not False
        if named is None and not stored:
            return None
        if named is not None and not stored:
            raise APIError(
                400, "store: false is for stateless requests; ctxwindow keeps every turn of a"
                f" session, and this request names one ({named[2]})", param="store",
            )  # fmt: skip
        sid, session_id, _ = named or (*new_session(tenant), "")
        previous = self.body.get("previous_response_id")
        if previous is not None and not await self.service.session_size(sid):
            raise not_found(previous)
        self.rid = response_id(session_id)
        return sid

    def admit(self, context: Context, budget: int) -> None:
        """With truncation disabled, refuse before storing anything what cannot fit whole."""
        tokenizer = self.service.tokenizer(self.model)
        new = sum(tokenizer.message_tokens(m) for m in self.turns)
        if _truncated(context) or context.total_tokens + new > budget:
            raise _does_not_fit(budget)

    def check(self, context: Context, budget: int) -> None:
        if self.previews and _truncated(context):
            raise _does_not_fit(budget)

    def forward(self, context: list[Message], stable: int) -> dict[str, Any]:
        out = _upstream_body(self.body, self.instructions)
        out["input"] = to_responses(context)
        return out

    def passed_through(self, sent: list[Message]) -> dict[str, Any]:
        if self.service.redactor is None:  # sent as the client wrote it
            return _upstream_body(self.body, self.instructions)
        return self.forward(sent, 0)

    def reply(self, data: Any) -> Message | None:
        return responses_reply(data)

    def usage(self, data: Any) -> dict[str, Any] | None:
        return _usage(data)

    def collector(self) -> ResponsesStream:
        return ResponsesStream(self.ours)

    def answer(self, data: Any, raw: bytes) -> bytes:
        return orjson.dumps(self.ours(data))

    def kept(self, answer: Any) -> dict[str, Any] | None:
        """The response the client got (a stream's: its last event's,
        ``ResponsesStream.answered``), masked as the reply is. A response no store could
        keep (nested past its limit) is not kept: the reply is."""
        response = answer.answered() if isinstance(answer, ResponsesStream) else answer
        if not isinstance(response, dict):
            return None
        response = self.ours(response)
        if find_unstorable(response, MAX_DEPTH - 1) is not None:
            return None
        return {KEPT: _masked(self.service, response)}

    def replay(self, entry: Entry) -> Response:
        kept = entry.metadata.get(KEPT)
        response = kept if isinstance(kept, dict) else self.ours(_replayed(entry, self.model))
        return _replay(self.stream, response)

    def ours(self, response: Any) -> Any:
        """The upstream's response as the client's: our id, its previous response,
        conversation."""
        return _ours(response, self.rid, self.body)


def _truncated(context: Context) -> bool:
    """Whether the built context leaves out or shortens any of the session's history."""
    report = context.report
    return report.evicted_entries > 0 or any(d.state in TRUNCATED for d in report.decisions)


TRUNCATED = ("compressed", "evicted", "summarized")  # report states


def _check(body: dict[str, Any]) -> None:
    """The fields the route reads, of the types it reads (a 400 naming the field)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise APIError(400, "'model' must be a model name", param="model")
    for name in ("stream", "store"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise invalid(name, "must be true or false")
    value = body.get("max_output_tokens")
    if value is not None and (type(value) is not int or not 0 <= value <= MAX_COUNT):
        raise invalid("max_output_tokens", "must be a whole number from 0 to 2**63 - 1")
    if body.get("truncation") not in (None, "auto", "disabled"):
        raise invalid("truncation", 'must be "auto" or "disabled"')
    for name in ("instructions", "previous_response_id"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise invalid(name, "must be a string")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise invalid("metadata", "must be an object")


def _instructions(service: Service, instructions: str | None) -> str | None:
    """The request's instructions, masked when a redactor runs (they are sent, not stored)."""
    if instructions is None or service.redactor is None:
        return instructions
    return chat_text(service.redactor({"role": "system", "content": instructions})["content"])


def _system_tokens(service: Service, model: str, text: str | None) -> int:
    if not text:
        return 0
    return service.tokenizer(model).message_tokens({"role": "system", "content": text})


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


class ResponsesStream:
    """The reply a Responses event stream adds up to; its events carry our response id."""

    last = "response.completed"

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
        return openai_error_event(error)


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


def _replay(stream: bool, response: dict[str, Any]) -> Response:
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
