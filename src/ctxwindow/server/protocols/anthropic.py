"""The Anthropic Messages API (``POST /v1/messages``) over a session's context.

The session is named by ``X-Session-Id`` (Anthropic's ``metadata`` holds only
``user_id``); without it the request passes through statelessly, checked
against the budget. ``messages`` are the session's new turns: a user
message's ``tool_result`` blocks are stored as tool results of the
assistant's ``tool_use`` (one unit in the windows). ``system`` is this
request's system prompt: sent first, counted, not stored (the session's own
system messages follow it). The budget is the model's, less ``max_tokens``
(required, as Anthropic's), the tool definitions and ``system``.

Upstream, the request goes to ``{upstream}/messages`` with the API key in
``x-api-key`` and the client's ``anthropic-version`` (default
``2023-06-01``) and ``anthropic-beta``. Clients authenticate to the service
with ``Authorization: Bearer`` or ``x-api-key`` (what the Anthropic SDK sends).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi import Header, Request, Response

from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry, Message, validate_message
from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.openapi import object_body
from ctxwindow.server.protocols.base import Adapter
from ctxwindow.server.protocols.blocks import (
    LEFT_OUT,
    NOTED,
    anthropic_blocks,
    anthropic_reply,
    anthropic_usage,
    closed,
    from_anthropic,
    to_anthropic,
    with_breakpoint,
)
from ctxwindow.server.protocols.wire import chat_text
from ctxwindow.server.service import Service
from ctxwindow.server.sse import StreamFault
from ctxwindow.stores.base.checks import MAX_COUNT

ANTHROPIC_VERSION = "2023-06-01"  # sent upstream when the client sends none
PASSED_ON = ("anthropic-version", "anthropic-beta")  # request headers sent upstream


def body_schema(required: list[str]) -> dict[str, Any]:
    """The ``openapi_extra`` of a route taking a Messages body with ``required`` fields."""
    return object_body(
        required,
        {
            "model": {"type": "string", "minLength": 1},
            "messages": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object", "required": ["role", "content"],
                    "properties": {"role": {"enum": ["user", "assistant"]}},
                },
            },
            "max_tokens": {"type": "integer", "minimum": 1},
            "system": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "object"}},
                ]
            },
            "stream": {"type": "boolean"},
            "tools": {"type": "array", "items": {"type": "object"}},
            "metadata": {"type": "object"},
        },
    )  # fmt: skip


class AnthropicMessages(Adapter):
    """An Anthropic message over the session's context (``X-Session-Id``)."""

    path = "/v1/messages"
    upstream_path = "messages"
    schema = body_schema(["model", "messages", "max_tokens"])
    beside = ("system", "the system prompt and tools")

    def __init__(self, service: Service, request: Request, body: dict[str, Any]) -> None:
        check(body)
        super().__init__(service, request, body)
        self.turns = from_anthropic(body.get("messages"), service.settings.max_message_chars)
        self.system, self.extra = beside(service, body)
        self.reply_tokens = body["max_tokens"]
        passed = inputs.passed_on(request, PASSED_ON)
        self.headers = service.upstream.headers(
            {"anthropic-version": ANTHROPIC_VERSION, **passed}, key="x-api-key"
        )

    def forward(self, context: list[Message], stable: int) -> dict[str, Any]:
        stored, turns = to_anthropic(context)
        if thinks(self.body):
            turns = closed(turns)
        blocks = [dict(block) for block in self.system] + stored
        with_breakpoint(blocks, turns, context[:stable], before=len(self.system))
        return _upstream_body(self.body, blocks, turns)

    def passed_through(self, sent: list[Message]) -> dict[str, Any]:
        if self.service.redactor is None:  # sent as the client wrote it (cache_control and all)
            return self.body
        stored, converted = to_anthropic(sent)
        return _upstream_body(self.body, self.system + stored, converted)

    def reply(self, data: Any) -> Message | None:
        return anthropic_reply(data)

    def usage(self, data: Any) -> dict[str, Any] | None:
        return anthropic_usage(data.get("usage")) if isinstance(data, dict) else None

    def collector(self) -> MessagesStream:
        return MessagesStream()

    def answer(self, data: Any, raw: bytes) -> bytes:
        return orjson.dumps(data)

    def replay(self, entry: Entry) -> Response:
        return _replay(entry, self.stream, self.model)


def keyed_tenant(service: Service) -> Any:
    """The tenant of ``Authorization: Bearer KEY`` or ``x-api-key: KEY``, once admitted."""

    async def tenant(
        authorization: str | None = Header(None), x_api_key: str | None = Header(None)
    ) -> str:
        if authorization is None and x_api_key is not None:
            authorization = f"Bearer {x_api_key}"
        name = service.tenants.authenticate(authorization)
        await service.tenants.admit(name)
        return name

    return tenant


def check(body: dict[str, Any], *, max_tokens: bool = True) -> None:
    """The fields the routes read, of the types they read (a 400 naming the field);
    ``max_tokens`` required unless told otherwise (``count_tokens`` takes none)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise APIError(400, "'model' must be a model name", param="model")
    value = body.get("max_tokens")
    valid = type(value) is int and 1 <= value <= MAX_COUNT
    if not valid and (max_tokens or value is not None):
        what = "is required:" if max_tokens else "must be"
        raise APIError(
            400, f"'max_tokens' {what} a whole number from 1 to 2**63 - 1",
            code="invalid_value", param="max_tokens",
        )  # fmt: skip
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise APIError(400, "'stream' must be true or false", code="invalid_value", param="stream")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise APIError(400, "'metadata' must be an object", code="invalid_value", param="metadata")


def beside(service: Service, body: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The request's ``system`` as text blocks, and the tokens sent beside its messages:
    the tools, ``system``, and the room kept free for ``LEFT_OUT`` (``to_anthropic``) and,
    with thinking on, for ``NOTED`` (``closed``)."""
    system = _system(service, body.get("system"))
    tokenizer = service.tokenizer(body["model"])
    extra = tokenizer.tools_tokens(_tools(body.get("tools")))
    extra += tokenizer.message_tokens({"role": "system", "content": _text_of(system)})
    if thinks(body):  # ``closed``'s turn
        extra += tokenizer.message_tokens(NOTED)
    return system, extra + tokenizer.message_tokens(LEFT_OUT)


def thinks(body: dict[str, Any]) -> bool:
    """Whether the request turns extended thinking on."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def counted(service: Service, model: str, sent: list[Message], extra: int) -> int:
    """The prompt tokens of ``sent`` (messages as they go upstream) and ``extra`` beside
    them; a 400 for a message that is not valid."""
    try:
        for i, message in enumerate(sent):
            validate_message(message, where=f"messages[{i}]")
        return service.tokenizer(model).count(sent) + extra
    except (CtxWindowError, ValueError) as exc:
        raise from_library(exc) from exc


def _system(service: Service, system: Any) -> list[dict[str, Any]]:
    """``system`` as text blocks (a string is one), masked when a redactor runs."""
    if system is None:
        return []
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system
    if not isinstance(blocks, list):
        raise APIError(400, "'system' must be a string or an array of text blocks", param="system")
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise APIError(400, f"system.{i} must be a text block", param=f"system.{i}")
        if not isinstance(block.get("text"), str):
            raise APIError(400, f"system.{i}.text must be a string", param=f"system.{i}.text")
    if service.redactor is None:
        return blocks
    return [{**b, "text": _masked(service, b["text"])} for b in blocks]


def _masked(service: Service, text: str) -> str:
    assert service.redactor is not None
    return chat_text(service.redactor({"role": "system", "content": text})["content"])


def _text_of(system: list[dict[str, Any]]) -> str:
    return "\n".join(block["text"] for block in system)


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    """Anthropic tool definitions as chat tools, checked (their tokens are counted)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be an array of tools", code="invalid_tools", param="tools")
    chat: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise APIError(
                400, f"tools.{i} must be an object", code="invalid_tools", param=f"tools.{i}"
            )
        function = {k: tool[k] for k in ("name", "description") if k in tool}
        if "input_schema" in tool:
            function["parameters"] = tool["input_schema"]
        try:
            inputs.check_tools([{"type": "function", "function": function}])
        except APIError as exc:
            where = (exc.param or "").replace("tools.0.function", f"tools.{i}")
            where = where.replace(".parameters", ".input_schema")
            raise APIError(400, f"{where} {str(exc).split(' ', 1)[1]}", code=exc.code,
                           param=where) from exc  # fmt: skip
        chat.append({"type": "function", "function": function})
    return chat


def _upstream_body(
    body: dict[str, Any], system: list[dict[str, Any]], turns: list[Message]
) -> dict[str, Any]:
    out = {**body, "messages": turns}
    if system:
        out["system"] = system
    else:
        out.pop("system", None)
    return out


class MessagesStream:
    """The reply an Anthropic event stream adds up to: its text and tool_use blocks."""

    last = "message_stop"

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self._usage: dict[str, Any] = {}

    def add(self, event: dict[str, Any]) -> bytes | None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            self._count(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "message_delta":
            self._count(event.get("usage"))
        elif kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, dict):
                raise _malformed(kind)
            self.blocks[_index(event)] = {
                **block,
                "parts": [str(block.get("text") or block.get("thinking") or "")],
            }
        elif kind == "content_block_delta":
            self._delta(event)
        return None

    def _count(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if isinstance(v, int)})
            self.usage = anthropic_usage(self._usage)

    def _delta(self, event: dict[str, Any]) -> None:
        block, delta = self.blocks.get(_index(event)), event.get("delta")
        if block is None or not isinstance(delta, dict):
            raise _malformed("content_block_delta")
        kind = delta.get("type")
        if kind == "signature_delta":  # a thinking block's signature comes whole, last
            block["signature"] = delta.get("signature")
            return
        piece = delta.get(_DELTAS.get(str(kind), ""))
        if kind in _DELTAS:
            if not isinstance(piece, str):
                raise _malformed("content_block_delta")
            block["parts"].append(piece)

    def ends(self, event: dict[str, Any]) -> bool:
        return event.get("type") == "message_stop"

    def message(self) -> Message | None:
        content = [self._block(self.blocks[i]) for i in sorted(self.blocks)]
        message = anthropic_reply({"content": content})
        if message is None:
            raise _malformed("tool_use")
        if message["content"] is None and not message.get("tool_calls"):
            return None
        return message

    @staticmethod
    def _block(block: dict[str, Any]) -> dict[str, Any]:
        joined = "".join(block["parts"])
        if block.get("type") == "tool_use":
            try:
                arguments = json.loads(joined) if joined else block.get("input") or {}
            except ValueError as exc:
                raise _malformed("input_json_delta") from exc
            return {"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                    "input": arguments}  # fmt: skip
        if block.get("type") == "thinking":
            return {"type": "thinking", "thinking": joined, "signature": block.get("signature")}
        if block.get("type") == "redacted_thinking":
            return {"type": "redacted_thinking", "data": block.get("data")}
        return {"type": block.get("type"), "text": joined}

    def error_event(self, error: APIError) -> bytes:
        """An ``error`` event, which the Anthropic SDKs raise on (they skip unnamed events)."""
        return b"\nevent: error\ndata: " + orjson.dumps(error.body(anthropic=True)) + b"\n\n"


# A delta's type -> its field that adds to the block
_DELTAS = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    if type(index) is not int:
        raise _malformed(str(event.get("type")))
    return index


def _malformed(kind: str) -> StreamFault:
    return StreamFault("malformed", f"the upstream stream sent a malformed {kind} event")


def _replayed(entry: Entry, model: str) -> dict[str, Any]:
    """The stored reply of a retried request as a Messages body."""
    calls = entry.message.get("tool_calls")
    return {
        "id": f"msg_{entry.id}", "type": "message", "role": "assistant", "model": model,
        "content": anthropic_blocks(entry.message),
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0},
    }  # fmt: skip


def _replay(entry: Entry, stream: bool, model: str) -> Response:
    headers = {"X-Context-Replayed": "true"}
    message = _replayed(entry, model)
    if not stream:
        return Response(orjson.dumps(message), headers=headers, media_type="application/json")
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}}
    ]
    for i, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start, delta = (
                {"type": "text", "text": ""},
                {"type": "text_delta", "text": block["text"]},
            )
        events += [
            {"type": "content_block_start", "index": i, "content_block": start},
            {"type": "content_block_delta", "index": i, "delta": delta},
            {"type": "content_block_stop", "index": i},
        ]
    events += [
        {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
         "stop_sequence": None}, "usage": {"output_tokens": 0}},
        {"type": "message_stop"},
    ]  # fmt: skip
    sse = b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )
    return Response(sse, headers=headers, media_type="text/event-stream")
