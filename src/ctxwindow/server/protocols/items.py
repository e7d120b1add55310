"""Responses API items to and from the chat messages sessions keep.

======================================  =========================================
Responses                               chat
======================================  =========================================
message item (text, image)              ``user``, ``assistant``, ``system``... message
``function_call``                       ``tool_calls`` of an assistant message
``function_call_output``                a ``tool`` message
======================================  =========================================

A call and its result are one unit in the windows. Refusals are 400s naming
the field (``input.2.content.0.type``), before anything is stored.
"""

from __future__ import annotations

from typing import Any

from ctxwindow.server.errors import APIError
from ctxwindow.server.protocols.wire import (
    Message,
    assistant,
    bad,
    chat_text,
    checked_size,
    prompt_usage,
    text,
    too_large,
)

RESPONSES_ITEMS = ("message", "function_call", "function_call_output")
_ROLES = ("user", "assistant", "system", "developer")


def from_responses(input_: Any, max_chars: int) -> list[Message]:
    """The chat messages of a Responses ``input``: a string, or a list of items.

    Consecutive ``function_call`` items join the assistant message before
    them (one turn, several calls), as a reply's output has them.
    """
    if isinstance(input_, str):
        return [{"role": "user", "content": checked_size(input_, "input", max_chars)}]
    if not isinstance(input_, list) or not input_:
        raise bad("input", "must be a string or a non-empty array of items")
    out: list[Message] = []
    for i, item in enumerate(input_):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise bad(where, "must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message_item(item, where, max_chars))
        elif kind == "function_call":
            _add_call(out, _function_call(item, where))
        elif kind == "function_call_output":
            out.append(_call_output(item, where, max_chars))
        else:
            raise bad(
                f"{where}.type", f"is {kind!r}: ctxwindow keeps items of the types"
                f" {', '.join(RESPONSES_ITEMS)} (leave out reasoning and built-in tool items)",
            )  # fmt: skip
    return out


def _message_item(item: dict[str, Any], where: str, max_chars: int) -> Message:
    role = item.get("role")
    if role not in _ROLES:
        raise bad(f"{where}.role", f"must be one of {', '.join(_ROLES)}")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": checked_size(content, f"{where}.content", max_chars)}
    if not isinstance(content, list):
        raise bad(f"{where}.content", "must be a string or an array of content parts")
    parts = [_part(p, f"{where}.content.{j}") for j, p in enumerate(content)]
    if sum(len(p.get("text", p.get("refusal", ""))) for p in parts) > max_chars:
        raise too_large(f"{where}.content", max_chars)
    if role == "assistant":  # an assistant's content: its text
        return {"role": role, "content": _joined(parts, f"{where}.content")}
    return {"role": role, "content": parts}


def _part(part: Any, where: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise bad(where, "must be an object")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": text(part.get("text"), f"{where}.text")}
    if kind == "refusal":
        return {"type": "refusal", "refusal": text(part.get("refusal"), f"{where}.refusal")}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise bad(f"{where}.image_url", "must be a URL or a data: URL (file_id is not kept)")
        detail = part.get("detail") or "auto"
        if detail not in ("low", "high", "auto"):
            raise bad(f"{where}.detail", "must be low, high or auto")
        return {"type": "image_url", "image_url": {"url": url, "detail": detail}}
    raise bad(
        f"{where}.type", f"is {kind!r}: ctxwindow keeps input_text, output_text, refusal and"
        " input_image parts",
    )  # fmt: skip


def _joined(parts: list[dict[str, Any]], where: str) -> str:
    if any(p["type"] == "image_url" for p in parts):
        raise bad(where, "of an assistant message holds text only")
    return "".join(p.get("text", p.get("refusal", "")) for p in parts)


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    arguments = item.get("arguments", "")
    return {
        "id": text(item.get("call_id"), f"{where}.call_id"),
        "type": "function",
        "function": {
            "name": text(item.get("name"), f"{where}.name"),
            "arguments": text(arguments, f"{where}.arguments"),
        },
    }


def _add_call(out: list[Message], call: dict[str, Any]) -> None:
    """A call joins the assistant message just before it, else starts one."""
    if out and out[-1]["role"] == "assistant":
        out[-1].setdefault("tool_calls", []).append(call)
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: dict[str, Any], where: str, max_chars: int) -> Message:
    call_id = text(item.get("call_id"), f"{where}.call_id")
    output = item.get("output")
    if isinstance(output, str):
        content: Any = checked_size(output, f"{where}.output", max_chars)
    elif isinstance(output, list):
        content = [_part(p, f"{where}.output.{j}") for j, p in enumerate(output)]
        if sum(len(p.get("text", "")) for p in content) > max_chars:
            raise too_large(f"{where}.output", max_chars)
    else:
        raise bad(f"{where}.output", "must be a string or an array of content parts")
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def to_responses(messages: list[Message]) -> list[dict[str, Any]]:
    """A built context as Responses input items (sent whole: the upstream keeps no state)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role, content = message["role"], message.get("content")
        if role == "tool":
            output = content if isinstance(content, str) else _input_parts(content or [])
            items.append(
                {"type": "function_call_output", "call_id": message["tool_call_id"],
                 "output": output}
            )  # fmt: skip
            continue
        if role == "assistant":
            text = chat_text(content)
            if text or not message.get("tool_calls"):
                items.append({"type": "message", "role": "assistant", "content": text})
            items.extend(
                {"type": "function_call", "call_id": call["id"],
                 "name": call["function"]["name"],
                 "arguments": call["function"].get("arguments") or "{}"}
                for call in message.get("tool_calls") or ()
            )  # fmt: skip
            continue
        if not isinstance(content, str):
            content = _input_parts(content or [])
        items.append({"type": "message", "role": _role(role), "content": content})
    return items


def _role(role: str) -> str:
    return "user" if role == "function" else role


def _input_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if part.get("type") == "image_url":
            image = part["image_url"]
            out.append(
                {"type": "input_image", "image_url": image["url"],
                 "detail": image.get("detail", "auto")}
            )  # fmt: skip
        else:
            out.append({"type": "input_text", "text": part.get("text", part.get("refusal", ""))})
    return out


def responses_reply(data: Any) -> Message | None:
    """The assistant message of a response body's ``output`` (its text and function calls;
    reasoning and built-in tool items are not kept); None if it has no ``output`` list."""
    output = data.get("output") if isinstance(data, dict) else None
    if not isinstance(output, list):
        return None
    return output_message(output)


def output_message(output: list[Any]) -> Message | None:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, dict):
            return None
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    text.append(str(part.get("text", part.get("refusal", ""))))
        elif item.get("type") == "function_call":
            try:
                calls.append(_function_call(item, "output"))
            except APIError:
                return None
    return assistant("".join(text), calls)


def responses_usage(usage: Any) -> dict[str, Any] | None:
    """A Responses ``usage`` as calibration reads it (``prompt_tokens``: all input tokens)."""
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
        return None
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return prompt_usage(usage["input_tokens"], cached)
