"""Requests of the three protocols the service speaks, built from chat messages, for the
fault tests."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi.testclient import TestClient

CLAUDE = "claude-sonnet-4-5"


def send(
    http: TestClient,
    protocol: str,
    sid: str,
    turns: list[dict[str, Any]],
    stream: bool = False,
    **headers: str,
) -> httpx.Response:
    """``turns`` (chat messages: user text, an assistant's tool call) as new turns of the
    session ``sid`` in ``protocol`` (chat completions, Responses, Anthropic Messages)."""
    headers["X-Session-Id"] = sid.encode()  # type: ignore[assignment]  # UTF-8, as clients send
    if protocol == "chat":
        body: dict[str, Any] = {"model": "gpt-4o", "messages": turns, "stream": stream}
        return http.post("/v1/chat/completions", json=body, headers=headers)
    if protocol == "responses":
        items: list[dict[str, Any]] = []
        for turn in turns:
            if turn.get("tool_calls"):
                call = turn["tool_calls"][0]
                items.append({"type": "function_call", "call_id": call["id"],
                              "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})  # fmt: skip
            else:
                items.append({"type": "message", "role": turn["role"], "content": turn["content"]})
        body = {"model": "gpt-4o", "input": items, "conversation": sid, "stream": stream}
        return http.post("/v1/responses", json=body, headers=headers)
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.get("tool_calls"):
            call = turn["tool_calls"][0]
            block = {"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                     "input": {"order": "D-4"}}  # fmt: skip
            messages.append({"role": "assistant", "content": [block]})
        else:
            messages.append(turn)
    body = {"model": CLAUDE, "max_tokens": 64, "messages": messages, "stream": stream}
    return http.post("/v1/messages", json=body, headers=headers)
