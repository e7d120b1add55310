"""What a request carries, read and checked before any of it is used.

Every refusal is an ``APIError`` naming the field, header or parameter at
fault, so no input reaches the library (or a store) in a shape that would
make it fail with a 5xx.
"""

from __future__ import annotations

import json
import re
from contextlib import aclosing
from typing import Any

import orjson
from fastapi import Request

from ctxwindow.server.errors import APIError
from ctxwindow.stores.base.checks import MAX_COUNT, find_unstorable

MAX_DEPTH = 64  # lists and objects in a request body, each inside the last


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
    """The request's JSON object; 413 above ``limit`` bytes, 400 if it is not an object.

    Also 400, naming where, for what no part of the service could keep or send
    on: lists and objects nested deeper than ``MAX_DEPTH``, a string (or key)
    holding NUL or a lone surrogate (``"\\ud800"``), a number out of range.
    """
    data = parse_json(await read_body(request, limit))
    if not isinstance(data, dict):
        raise APIError(400, "the body must be a JSON object", code="invalid_json")
    return data


def parse_json(raw: bytes) -> Any:
    """``raw`` as JSON, with what ``read_json`` refuses refused (400).

    orjson parses; what it refuses is parsed again by ``json``, whose errors
    (and whose lone surrogates and big numbers, refused below) name the fault.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = _parsed_slowly(raw)
    bad = find_unstorable(data, MAX_DEPTH)
    if bad is not None:
        path, why = bad
        if len(path) >= MAX_DEPTH:
            raise _too_deep()
        where = ".".join(map(str, path))
        raise APIError(400, f"{where or 'the body'} {why}", code="invalid_value", param=where)
    return data


def _parsed_slowly(raw: bytes) -> Any:
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError as exc:
        raise _too_deep() from exc
    except ValueError as exc:
        raise APIError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _too_deep() -> APIError:
    return APIError(
        400, f"the body nests lists and objects deeper than {MAX_DEPTH} levels",
        code="invalid_value",
    )  # fmt: skip


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


def check_tools(tools: Any) -> list[dict[str, Any]] | None:
    """``tools`` (None, or a list of tool objects) as far as the service reads them.

    The service counts their tokens, so it reads, of each tool's ``function``
    (or of the tool itself, for legacy function definitions): ``name`` and
    ``description`` (strings) and ``parameters`` (an object whose
    ``properties`` map names to objects with a string ``description``, a list
    ``enum`` and a ``type`` string or list). Anything else there is a 400
    naming it.
    """
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _bad_tool("tools", "must be an array of tool objects")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad_tool(f"tools.{i}", "must be an object")
        where = f"tools.{i}.function" if "function" in tool else f"tools.{i}"
        function = tool.get("function", tool)
        if not isinstance(function, dict):
            raise _bad_tool(where, "must be an object")
        _check_strings(function, ("name", "description"), where)
        parameters = function.get("parameters")
        if parameters is not None:
            _check_parameters(parameters, f"{where}.parameters")
    return tools


def _check_parameters(parameters: Any, where: str) -> None:
    if not isinstance(parameters, dict):
        raise _bad_tool(where, "must be a JSON Schema object")
    properties = parameters.get("properties")
    if properties is None:
        return
    if not isinstance(properties, dict):
        raise _bad_tool(f"{where}.properties", "must be an object")
    for name, schema in properties.items():
        at = f"{where}.properties.{name}"
        if not isinstance(schema, dict):
            raise _bad_tool(at, "must be an object")
        _check_strings(schema, ("description",), at)
        if schema.get("enum") is not None and not isinstance(schema["enum"], list):
            raise _bad_tool(f"{at}.enum", "must be an array")
        kind = schema.get("type")
        if kind is not None and not isinstance(kind, (str, list)):
            raise _bad_tool(f"{at}.type", "must be a string or an array of strings")


def _check_strings(value: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if value.get(key) is not None and not isinstance(value[key], str):
            raise _bad_tool(f"{where}.{key}", "must be a string")


def _bad_tool(where: str, what: str) -> APIError:
    return APIError(400, f"{where} {what}", code="invalid_tools", param=where)


_DIGITS = re.compile(r"[0-9]+")


def context_max_tokens(request: Request) -> int | None:
    """``X-Context-Max-Tokens``: a whole number of tokens from 1, or None if absent.

    Only ASCII digits: ``"²"`` or ``"١٢"`` are digits to ``str.isdigit`` but
    not numbers here. The header only narrows the budget, so a number past
    any budget is taken as 2**63 - 1 (it narrows nothing) rather than refused,
    without ever parsing a number of thousands of digits.
    """
    header = request.headers.get("x-context-max-tokens")
    if header is None:
        return None
    digits = header.lstrip("0")
    if _DIGITS.fullmatch(header) is None or not digits:
        shown = header if len(header) <= 40 else f"{header[:40]}…"
        raise APIError(
            400, f"X-Context-Max-Tokens must be a whole number of tokens from 1, got {shown!r}",
            code="invalid_header", param="X-Context-Max-Tokens",
        )  # fmt: skip
    return MAX_COUNT if len(digits) > 19 else min(int(digits), MAX_COUNT)


def header_text(request: Request, name: str) -> str | None:
    """The header ``name`` as the UTF-8 text the client sent; None if absent.

    HTTP headers are bytes and Starlette reads them as Latin-1, so an id sent
    as UTF-8 (``会话``, ``🙂``) arrives as other characters; read back as UTF-8
    it is the same id as in a URL (percent-encoded UTF-8) or a JSON body.
    Bytes that are not UTF-8 are a 400 naming the header.
    """
    value = request.headers.get(name)
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(
            400, f"{name} is not UTF-8 text: {exc.reason} at byte {exc.start}",
            code="invalid_header", param=name,
        ) from exc  # fmt: skip


def passed_on(request: Request, names: tuple[str, ...]) -> dict[str, str]:
    """The headers ``names`` the client sent, to send upstream as they are: each must be
    printable ASCII (what an HTTP client can send on), else a 400 naming it, before
    anything is stored."""
    out: dict[str, str] = {}
    for name in names:
        value = request.headers.get(name)
        if value is None:
            continue
        if not all(" " <= c <= "~" for c in value):
            raise APIError(
                400, f"{name} must be printable ASCII, as the upstream API defines it",
                code="invalid_header", param=name,
            )  # fmt: skip
        out[name] = value
    return out


def session_id(request: Request, body: dict[str, Any]) -> str | None:
    """The session named by ``X-Session-Id`` (UTF-8), else by ``metadata.session_id``.

    Give it to ``tenants.scoped``, which normalises it (NFC) and checks its length.
    """
    header = header_text(request, "X-Session-Id")
    if header is not None:
        return header
    metadata = body.get("metadata")
    value = metadata.get("session_id") if isinstance(metadata, dict) else None
    if value is not None and not isinstance(value, str):
        raise APIError(400, "metadata.session_id must be a string", param="metadata.session_id")
    return value


MAX_IDEMPOTENCY_KEY = 255


def idempotency_key(request: Request) -> str | None:
    """``Idempotency-Key`` (UTF-8, 1 to 255 characters), or None."""
    key = header_text(request, "Idempotency-Key")
    if key is not None and not 0 < len(key) <= MAX_IDEMPOTENCY_KEY:
        raise APIError(
            400, f"Idempotency-Key must have 1 to {MAX_IDEMPOTENCY_KEY} characters",
            code="invalid_header", param="Idempotency-Key",
        )  # fmt: skip
    return key


def check_completion(body: dict[str, Any]) -> None:
    """The fields of a chat completion request the service reads, of the types it reads.

    ``max_tokens`` and ``max_completion_tokens`` whole numbers from 0 to
    2**63 - 1, ``stream`` true or false, ``metadata`` an object (each may be
    absent or null); ``messages``, ``model``, ``tools`` and the session id
    have their own checks. A 400 naming the field, not a default taken for
    a value of the wrong type (``"max_tokens": []`` is not 0).
    """
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (type(value) is not int or not 0 <= value <= MAX_COUNT):
            raise APIError(
                400, f"'{name}' must be a whole number from 0 to 2**63 - 1", param=name,
                code="invalid_value",
            )  # fmt: skip
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise APIError(400, "'stream' must be true or false", param="stream", code="invalid_value")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise APIError(400, "'metadata' must be an object", param="metadata", code="invalid_value")
