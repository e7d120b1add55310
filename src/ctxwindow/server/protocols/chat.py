"""OpenAI Chat Completions (``POST /v1/chat/completions``): the sessions' own format.

The request's ``messages`` are the session's new turns, stored as they are;
the built context replaces them in the body sent upstream. A streamed reply
ends with ``data: [DONE]``; the service asks for the usage chunk (calibration
reads it) and drops it when the client did not ask for it.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request, Response

from ctxwindow.messages import Entry, Message
from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError
from ctxwindow.server.openapi import object_body
from ctxwindow.server.protocols.base import Adapter
from ctxwindow.server.service import Service
from ctxwindow.server.sse import DONE, DROP, Drop, StreamFault, openai_error_event
from ctxwindow.server.tenants import scoped

# What the Messages route keeps in a session's messages that Chat Completions has no field
# for: an assistant's thinking blocks, a tool result's error flag.
ANTHROPIC_ONLY = frozenset(("thinking", "is_error"))


def _for_chat(context: list[Message]) -> list[Message]:
    """The ``context`` as Chat Completions takes it (a session may have been fed by another
    route). Every message sent goes through here: most are taken as they are, after one
    set operation (any() over the keys took 5x as long, the call per message as much)."""
    return [
        message
        if ANTHROPIC_ONLY.isdisjoint(message)
        else {key: value for key, value in message.items() if key not in ANTHROPIC_ONLY}
        for message in context
    ]


class ChatCompletions(Adapter):
    """An OpenAI chat completion over the session's context (``X-Session-Id``)."""

    path = "/v1/chat/completions"
    upstream_path = "chat/completions"
    schema = object_body(
        ["model", "messages"],
        {
            "model": {"type": "string"},
            "messages": {"type": "array", "items": {"type": "object"}},
            "stream": {"type": "boolean"},
            "max_tokens": {"type": "integer"},
            "metadata": {"type": "object"},
        },
    )  # fmt: skip

    def __init__(self, service: Service, request: Request, body: dict[str, Any]) -> None:
        inputs.check_completion(body)
        self.tools = inputs.check_tools(body.get("tools"))
        turns = inputs.check_messages(body.get("messages"), service.settings.max_message_chars)
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise APIError(400, "'model' must be a model name", param="model")
        super().__init__(service, request, body)
        self.turns = turns
        reply = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if not isinstance(reply, int) or reply < 0:
            raise APIError(400, "'max_tokens' must be a positive integer", param="max_tokens")
        self.reply_tokens = reply
        self.extra = service.tokenizer(self.model).tools_tokens(self.tools)

    async def session(self, tenant: str) -> str | None:
        """``X-Session-Id``, or ``metadata.session_id`` of the body."""
        session_id = inputs.session_id(self.request, self.body)
        return None if session_id is None else scoped(tenant, session_id)

    def forward(self, context: list[Message], stable: int) -> dict[str, Any]:
        out = {**_without_session(self.body), "messages": _for_chat(context)}
        if self.stream and "stream_options" not in out:
            out["stream_options"] = {"include_usage": True}  # for calibration
        return out

    def count(self, sent: list[Message]) -> int:
        return self.service.tokenizer(self.model).count(sent, self.tools)

    def reply(self, data: Any) -> Message | None:
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        message = choices[0].get("message")
        return message if isinstance(message, dict) else None

    def usage(self, data: Any) -> dict[str, Any] | None:
        usage = data.get("usage") if isinstance(data, dict) else None
        return usage if isinstance(usage, dict) else None

    def collector(self) -> StreamedReply:
        return StreamedReply(hide_usage=self.stream and "stream_options" not in self.body)

    def replay(self, entry: Entry) -> Response:
        message = {k: v for k, v in entry.message.items() if k in ("role", "content", "tool_calls")}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        headers = {"X-Context-Replayed": "true"}
        base = {"id": f"chatcmpl-{entry.id}", "created": int(entry.created_at), "model": self.model}
        if not self.stream:
            choice = {"index": 0, "message": message, "finish_reason": finish}
            body = {**base, "object": "chat.completion", "choices": [choice]}
            return Response(orjson.dumps(body), headers=headers, media_type="application/json")
        chunk = {
            **base, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": message, "finish_reason": finish}],
        }  # fmt: skip
        sse = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
        return Response(sse, headers=headers, media_type="text/event-stream")


def _without_session(body: dict[str, Any]) -> dict[str, Any]:
    """The body less ``metadata.session_id`` (the service's, not the upstream's)."""
    out = dict(body)
    metadata = out.get("metadata")
    if isinstance(metadata, dict) and "session_id" in metadata:
        rest = {k: v for k, v in metadata.items() if k != "session_id"}
        if rest:
            out["metadata"] = rest
        else:
            del out["metadata"]
    return out


class StreamedReply:
    """The assistant message that a stream of ``chat.completion.chunk`` events adds up to:
    the content deltas joined, and tool calls assembled from their deltas by index."""

    last = "data: [DONE]"

    def __init__(self, *, hide_usage: bool = False) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None  # from the chunk that reports it
        self.hide_usage = hide_usage  # the service asked for usage, not the client: drop it

    def add(self, event: dict[str, Any]) -> bytes | Drop | None:
        """Take one ``chat.completion.chunk`` (its first choice's delta); ``StreamFault`` if
        its tool call deltas are not objects with an int ``index`` and string parts."""
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if self.hide_usage and event.get("usage") is not None and not event.get("choices"):
            return DROP
        choices = event.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        delta = first.get("delta") if isinstance(first, dict) else None
        if not isinstance(delta, dict):
            return None
        self.text.append(str(delta.get("content") or ""))
        for piece in delta.get("tool_calls") or ():
            index, function = _call_delta(piece)
            call = self.calls.setdefault(
                index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            call["id"] = piece.get("id") or call["id"]
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
        return None

    def ends(self, event: dict[str, Any]) -> bool:
        return event is DONE

    @property
    def empty(self) -> bool:
        return not "".join(self.text) and not self.calls

    def message(self) -> dict[str, Any] | None:
        """``{"content": ..., "tool_calls": [...]}`` as a non-streamed reply would have it;
        None for a reply with no text and no tool calls."""
        if self.empty:
            return None
        message: dict[str, Any] = {"content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message

    def error_event(self, error: APIError) -> bytes:
        return openai_error_event(error)


def _call_delta(piece: Any) -> tuple[int, dict[str, Any]]:
    """A tool call delta's index and function part; ``StreamFault`` if it is malformed."""
    if isinstance(piece, dict):
        index, function = piece.get("index", 0), piece.get("function") or {}
        if type(index) is int and isinstance(function, dict):
            parts = piece.get("id"), function.get("name"), function.get("arguments")
            if all(part is None or isinstance(part, str) for part in parts):
                return index, function
    raise StreamFault("malformed", "the upstream stream sent a malformed tool call delta")
