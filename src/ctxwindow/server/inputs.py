"""What a request carries, read and checked before any of it is used.

Every refusal is an ``APIError`` naming the field, header or parameter at
fault, so no input reaches the library (or a store) in a shape that would
make it fail with a 5xx.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

from fastapi import Request

from ctxwindow.server.errors import APIError


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body; a 413 as soon as it passes ``limit`` bytes.

    The body is read as it arrives and reading stops at the first chunk over
    the limit, so a chunked body (no Content-Length) or one longer than its
    Content-Length costs at most ``limit`` bytes plus one chunk.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async with aclosing(request.stream()) as chunks:
        async for chunk in chunks:
            body += chunk
            if len(body) > limit:
                raise _too_large(limit)
    return bytes(body)


def _too_large(limit: int) -> APIError:
    return APIError(413, f"request body over {limit} bytes", code="request_too_large")


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object; 413 above ``limit`` bytes, 400 if it is not an object."""
    raw = await read_body(request, limit)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise APIError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise APIError(400, "the body must be a JSON object", code="invalid_json")
    return data


def check_messages(messages: Any, max_chars: int) -> list[dict[str, Any]]:
    """A non-empty list of message objects, none above ``max_chars`` characters of text."""
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "'messages' must be a non-empty array", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise APIError(400, f"messages[{i}] must be an object", param=f"messages.{i}")
        if _chars(message.get("content")) > max_chars:
            raise APIError(
                413, f"messages[{i}] has over {max_chars} characters",
                code="message_too_large", param=f"messages.{i}.content",
            )  # fmt: skip
    return messages


def _chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    return 0
