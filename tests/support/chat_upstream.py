"""Fake chat-completions upstreams (httpx transports), one chat turn through the app, and
the check that the turns of one session never interleave."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from fastapi.testclient import TestClient


class FakeUpstream:
    """An OpenAI-compatible upstream: answers ``reply`` or fails as ``fail`` says."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx.Headers] = []
        self.fail: str | None = None  # "500", "connect", "timeout", "malformed", "no-choices"
        self.reply = "It left the depot this morning."

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(request.headers)
        if self.fail == "connect":
            raise httpx.ConnectError("refused", request=request)
        if self.fail == "timeout":
            raise httpx.ReadTimeout("slow", request=request)
        if self.fail == "500":
            return httpx.Response(500, json={"error": {"message": "boom"}})
        if self.fail == "malformed":
            return httpx.Response(200, content=b"<html>not json")
        if self.fail == "400":
            return httpx.Response(400, json={"error": {"message": "bad temperature"}})
        if self.fail == "no-choices":
            return httpx.Response(200, json={"id": "x", "choices": []})
        if body.get("stream"):
            return httpx.Response(
                200, content=_sse(self.reply, body["model"]),
                headers={"content-type": "text/event-stream"},
            )  # fmt: skip
        return httpx.Response(200, json=_completion(self.reply, body["model"]))

    @property
    def last(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.requests[-1]["messages"]
        return messages


def _completion(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text},
             "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def _sse(text: str, model: str) -> bytes:
    chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
    events = [
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": model,
         "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in chunks
    ]  # fmt: skip
    lines = [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def chat(http: TestClient, content: str, session: str = "s", **headers: str) -> Any:
    return http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": session, **headers},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": content}]},
    )


class SlowUpstream:
    """Answers "answer to: <last message>" after ``delay`` seconds, on the event loop."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.requests: list[dict[str, Any]] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        await asyncio.sleep(self.delay)
        text = f"answer to: {body['messages'][-1]['content']}"
        if body.get("stream"):
            return httpx.Response(
                200,
                content=_sse(text, body["model"]),
                headers={"content-type": "text/event-stream"},
            )
        return httpx.Response(200, json=_completion(text, body["model"]))


def assert_turns_never_interleave(history: list[dict[str, Any]], requests: list[Any]) -> None:
    """Every question is followed by its own answer, and each was asked over whole turns."""
    texts = [item["message"]["content"] for item in history]
    assert len(texts) % 2 == 0
    for question, answer in zip(texts[::2], texts[1::2], strict=True):
        assert answer == f"answer to: {question}"
    for body in requests:
        sent = [m["content"] for m in body["messages"]]
        asked = texts.index(sent[-1])
        assert sent == texts[: asked + 1]  # everything before it, answered, nothing after
