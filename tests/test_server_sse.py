"""Relaying a stream: bytes unchanged, the reply stored before the client sees ``[DONE]``;
a stream that does not end properly ends with an error event, and nothing is stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ctxwindow.server.errors import APIError
from ctxwindow.server.protocols.chat import StreamedReply
from ctxwindow.server.sse import relay as sse_reply


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
def test_the_reply_is_stored_before_the_end_reaches_the_client(size: int) -> None:
    """Whatever the chunking, even with [DONE] cut in two, bytes pass unchanged."""
    upstream = sse("Your parcel ", "is in 東京 ", "🚚") + b"data: [DONE]\n\n"
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


# -- a stream that does not end properly: an error event, and nothing to store ------------


async def failing(data: bytes, error: Exception) -> AsyncIterator[bytes]:
    yield data
    raise error


def relayed(chunks: AsyncIterator[bytes]) -> tuple[bytes, StreamedReply, list[str], list[str]]:
    """What the client is sent, the reply collected, finish() calls, and faults told."""
    reply, finished, faults = StreamedReply(), [], []

    async def finish() -> None:
        finished.append("stored")

    async def relay() -> bytes:
        return b"".join(
            [c async for c in sse_reply(chunks, reply, finish, lambda f: faults.append(f.kind))]
        )

    return asyncio.run(relay()), reply, finished, faults


def error_of(sent: bytes) -> dict[str, Any]:
    """The error event that ends ``sent`` (it must be the last event)."""
    assert sent.endswith(b"\n\n")
    last = sent.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    assert last.startswith(b"data: ")
    error: dict[str, Any] = json.loads(last[6:])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def ends(sent: bytes) -> bool:
    """Whether the client was sent the end of the stream, ``data: [DONE]``."""
    return any(line.strip() == b"data: [DONE]" for line in sent.split(b"\n"))


CUT = sse("Your parcel ", "is in 東京")


@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_a_stream_that_stops_before_done_is_an_error_and_not_stored(size: int) -> None:
    """A clean EOF without [DONE] (a cut proxy, a crashed worker) is not a reply."""
    sent, reply, finished, faults = relayed(pieces(CUT, size))
    assert finished == [] and faults == ["malformed"]
    assert sent.startswith(CUT) and not ends(sent)
    assert "before data: [DONE]" in error_of(sent)["message"]
    assert reply.message()["content"] == "Your parcel is in 東京"  # seen, never handed on


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (httpx.RemoteProtocolError("peer closed connection"), "bad_gateway", "connect"),
        (httpx.ReadError("connection reset by peer"), "bad_gateway", "connect"),
        (httpx.ReadTimeout("read timed out"), "upstream_timeout", "timeout"),
    ],
)
def test_a_stream_broken_off_ends_with_an_error_event(
    error: Exception, status: str, kind: str
) -> None:
    sent, _, finished, faults = relayed(failing(CUT[:-5], error))
    assert finished == [] and faults == [kind]
    assert error_of(sent)["code"] == status
    assert sent.startswith(CUT.split(b"\n\n")[0])  # whole lines are passed on as they come
    assert not ends(sent)


@pytest.mark.parametrize(
    "garbage",
    [
        b"<html><body>502 Bad Gateway</body></html>\n",
        b"data: {not json\n\n",
        b"data: 42\n\n",
        b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
        b'data: {"choices": [{"delta": {"tool_calls": [{"index": "zero"}]}}]}\n\n',
        b"data: " + b"[" * 100_000 + b"\n\n",
    ],
)
def test_garbage_in_a_stream_ends_it_with_an_error_event(garbage: bytes) -> None:
    sent, _, finished, faults = relayed(pieces(CUT + garbage + b"data: [DONE]\n\n", 64))
    assert finished == [] and len(faults) == 1
    assert error_of(sent)["code"] == "bad_gateway"
    assert garbage not in sent and not ends(sent)


def test_what_an_event_stream_may_hold_besides_data_passes() -> None:
    """Comments (keep-alives), other fields, CRLF line ends, a usage chunk without choices."""
    upstream = (
        b": keep-alive\r\n\r\n"
        + b"event: message\nid: 7\nretry: 1000\n"
        + sse("Your parcel ", "is in 東京").replace(b"\n", b"\r\n")
        + b'data: {"choices": [], "usage": {"prompt_tokens": 9}}\n\n'
        + b"data: [DONE]"  # the last line without its line end
    )
    sent, reply, finished, faults = relayed(pieces(upstream, 5))
    assert sent == upstream and finished == ["stored"] and faults == []
    assert reply.message()["content"] == "Your parcel is in 東京"


def test_a_reply_that_cannot_be_stored_ends_the_stream_with_that_error() -> None:
    """finish() failing (the store went down) is told to the client instead of [DONE]."""

    async def finish() -> None:
        raise APIError(503, "session store unavailable", code="store_unavailable")

    async def relay() -> bytes:
        upstream = pieces(CUT + b"data: [DONE]\n\n", 64)
        return b"".join([c async for c in sse_reply(upstream, StreamedReply(), finish)])

    sent = asyncio.run(relay())
    assert not ends(sent) and error_of(sent)["code"] == "store_unavailable"
