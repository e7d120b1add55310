"""Fake upstreams of the Responses and Anthropic Messages protocols.

Each records what it receives (body, headers, path) and answers ``reply``
(or a tool call when the request has tools and does not end with a tool's
result), streamed or not, or fails as ``fail`` says: "500" (an error status),
"malformed" (a 200 whose body is not the protocol's), "cut" (a stream that
stops before its last event), "error" (a stream that reports an error event).
In-process through ``transport()``; ``tests/support/faults/upstream.py`` serves the
same answers over real HTTP.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx
from fastapi import FastAPI

from ctxwindow.server import Settings, create_app

REPLY = "It left the Leeds depot this morning."


class ProtocolFake:
    path = ""  # the route's last segment
    failure: ClassVar[tuple[int, dict[str, Any]]] = (500, {})
    malformed: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx.Headers] = []
        self.paths: list[str] = []
        self.fail: str | None = None
        self.reply = REPLY

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(request.headers)
        self.paths.append(request.url.path)
        if self.fail == "500":
            return httpx.Response(self.failure[0], json=self.failure[1])
        if self.fail == "malformed":
            return httpx.Response(200, json=self.malformed)
        answer = self.answer(body)
        if not body.get("stream"):
            return httpx.Response(200, json=answer)
        return httpx.Response(
            200, content=self.events(answer), headers={"content-type": "text/event-stream"}
        )

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, answer: dict[str, Any]) -> bytes:
        raise NotImplementedError


class FakeResponses(ProtocolFake):
    """A Responses upstream (``POST /v1/responses``)."""

    path = "responses"
    failure = (500, {"error": {"message": "boom"}})
    malformed: ClassVar[dict[str, Any]] = {"id": "resp_x", "object": "response"}

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["input"][-1]
        if body.get("tools") and last.get("type") != "function_call_output":
            output = [
                {"type": "function_call", "id": "fc_1", "call_id": f"call_{len(self.requests)}",
                 "name": "where_is", "arguments": '{"order": "D-4"}', "status": "completed"}
            ]  # fmt: skip
        else:
            output = [
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": self.reply, "annotations": []}]}
            ]  # fmt: skip
        return {
            "id": f"resp_upstream{len(self.requests)}", "object": "response", "created_at": 0,
            "model": body["model"], "status": "completed", "output": output,
            "previous_response_id": None, "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "tools": body.get("tools", []),
            "tool_choice": "auto", "parallel_tool_calls": True,
            "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
        }  # fmt: skip

    def events(self, answer: dict[str, Any]) -> bytes:
        started = {**answer, "status": "in_progress", "output": []}
        events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
        for i, item in enumerate(answer["output"]):
            events.append({"type": "response.output_item.added", "output_index": i,
                           "item": {**item, "status": "in_progress"}})  # fmt: skip
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events += [
                    {"type": "response.output_text.delta", "item_id": item["id"],
                     "output_index": i, "content_index": 0, "delta": text[j : j + 4]}
                    for j in range(0, len(text), 4)
                ]  # fmt: skip
            events.append({"type": "response.output_item.done", "output_index": i, "item": item})
        if self.fail == "error":
            events.append({"type": "error", "code": "server_error", "message": "overloaded"})
        events.append({"type": "response.completed", "response": answer})
        if self.fail == "cut":
            events = events[:-1]
        return b"".join(
            f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n".encode()
            for n, e in enumerate(events)
        )

    @property
    def last(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.requests[-1]["input"]
        return items


class FakeMessages(ProtocolFake):
    """An Anthropic Messages upstream (``POST /v1/messages``)."""

    path = "messages"
    failure = (529, {"type": "error", "error": {"type": "overloaded"}})
    malformed: ClassVar[dict[str, Any]] = {"type": "message", "content": "not blocks"}

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]["content"]
        answered = isinstance(last, list) and last[0].get("type") == "tool_result"
        if body.get("tools") and not answered:
            content = [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": f"toolu_{len(self.requests)}", "name": "where_is",
                 "input": {"order": "D-4"}},
            ]  # fmt: skip
        else:
            content = [{"type": "text", "text": self.reply}]
        if (body.get("thinking") or {}).get("type") == "enabled":  # extended thinking, signed
            thought = f"思考 {len(self.requests)}: the order is D-4, so ask where_is."
            content.insert(
                0,
                {
                    "type": "thinking",
                    "thinking": thought,
                    "signature": f"sig{len(self.requests)}==",
                },
            )
        return {
            "id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant",
            "model": body["model"], "content": content,
            "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 7},
        }  # fmt: skip

    def events(self, answer: dict[str, Any]) -> bytes:
        start = {**answer, "content": [], "stop_reason": None}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        for i, block in enumerate(answer["content"]):
            if block["type"] == "text":
                events.append({"type": "content_block_start", "index": i,
                               "content_block": {"type": "text", "text": ""}})  # fmt: skip
                events += [
                    {"type": "content_block_delta", "index": i,
                     "delta": {"type": "text_delta", "text": block["text"][j : j + 4]}}
                    for j in range(0, len(block["text"]), 4)
                ]  # fmt: skip
            elif block["type"] == "thinking":
                events.append({"type": "content_block_start", "index": i,
                               "content_block": {"type": "thinking", "thinking": ""}})  # fmt: skip
                events += [
                    {"type": "content_block_delta", "index": i,
                     "delta": {"type": "thinking_delta", "thinking": block["thinking"][j : j + 6]}}
                    for j in range(0, len(block["thinking"]), 6)
                ]  # fmt: skip
                events.append({"type": "content_block_delta", "index": i,
                               "delta": {"type": "signature_delta",
                                         "signature": block["signature"]}})  # fmt: skip
            else:
                events.append({"type": "content_block_start", "index": i,
                               "content_block": {**block, "input": {}}})  # fmt: skip
                arguments = json.dumps(block["input"])
                events += [
                    {"type": "content_block_delta", "index": i,
                     "delta": {"type": "input_json_delta", "partial_json": arguments[j : j + 5]}}
                    for j in range(0, len(arguments), 5)
                ]  # fmt: skip
            events.append({"type": "content_block_stop", "index": i})
        if self.fail == "error":
            events.append({"type": "error", "error": {"type": "overloaded_error",
                                                      "message": "Overloaded"}})  # fmt: skip
        events += [
            {"type": "message_delta", "delta": {"stop_reason": answer["stop_reason"]},
             "usage": {"output_tokens": 7}},
            {"type": "message_stop"},
        ]  # fmt: skip
        if self.fail == "cut":
            events = events[:-2]
        events.insert(1, {"type": "ping"})
        return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)

    @property
    def last(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.requests[-1]["messages"]
        return messages


def protocol_app(upstream: ProtocolFake, **settings: Any) -> FastAPI:
    """The service in memory, forwarding to ``upstream`` (no archive unless asked)."""
    settings.setdefault("store", "memory://")
    settings.setdefault("upstream", "http://upstream.test/v1")
    settings.setdefault("archive", "off")
    return create_app(Settings(**settings), upstream_transport=upstream.transport())
