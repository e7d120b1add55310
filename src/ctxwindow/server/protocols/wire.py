"""What the protocol converters share: their 400s and 413s, and a chat message's text."""

from __future__ import annotations

from typing import Any

from ctxwindow.server.errors import APIError

Message = dict[str, Any]


def bad(where: str, what: str, code: str = "invalid_message") -> APIError:
    return APIError(400, f"{where} {what}", code=code, param=where)


def too_large(where: str, max_chars: int) -> APIError:
    return APIError(
        413, f"{where} has over {max_chars} characters", code="message_too_large", param=where
    )


def text(value: Any, where: str) -> str:
    """``value`` if it is a string; a 400 naming ``where`` otherwise."""
    if not isinstance(value, str):
        raise bad(where, "must be a string")
    return value


def checked_size(text: str, where: str, max_chars: int) -> str:
    """``text`` if it has at most ``max_chars`` characters; a 413 naming ``where``."""
    if len(text) > max_chars:
        raise too_large(where, max_chars)
    return text


def chat_text(content: Any) -> str:
    """The text of a chat message's content (its text and refusal parts, joined)."""
    if isinstance(content, str):
        return content
    return "".join(
        str(p.get("text", p.get("refusal", ""))) for p in content or () if isinstance(p, dict)
    )


def assistant(text: str, calls: list[dict[str, Any]]) -> Message:
    """A reply as sessions keep it: its text (None when empty) and its tool calls, if any."""
    message: Message = {"content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def prompt_usage(prompt: int, cached: Any) -> dict[str, Any]:
    """A usage as calibration reads it: ``prompt_tokens`` (every input token), and the
    cached ones when the upstream says."""
    out: dict[str, Any] = {"prompt_tokens": prompt}
    if isinstance(cached, int):
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out
