"""Relaying a stream: bytes unchanged, the reply stored before the client sees ``[DONE]``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from ctxwindow.server.upstream import StreamedReply, sse_reply


def sse(*texts: str) -> bytes:
    events = [
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        for text in texts
    ]
    return "".join(f"data: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events).encode()


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
@pytest.mark.parametrize("done", [True, False])
def test_the_reply_is_stored_before_the_end_reaches_the_client(size: int, done: bool) -> None:
    """Whatever the chunking, even with [DONE] cut in two, bytes pass unchanged."""
    upstream = sse("Your parcel ", "is in 東京 ", "🚚") + (b"data: [DONE]\n\n" if done else b"")
    reply = StreamedReply()
    sent: list[bytes] = []
    seen_at_finish: list[bytes] = []

    async def finish() -> None:
        await asyncio.sleep(0)
        seen_at_finish.append(b"".join(sent))

    async def relay() -> None:
        async for chunk in sse_reply(pieces(upstream, size), reply, finish):
            sent.append(chunk)

    asyncio.run(relay())
    assert b"".join(sent) == upstream
    assert reply.message()["content"] == "Your parcel is in 東京 🚚"
    assert seen_at_finish and b"[DONE]" not in seen_at_finish[0]
    assert seen_at_finish[0] == upstream.split(b"data: [DONE]")[0]
