"""Anthropic Messages blocks to and from the chat messages sessions keep.

======================================  =========================================
Anthropic                               chat
======================================  =========================================
message (text, image blocks)            ``user`` or ``assistant`` message
``tool_use`` block                      ``tool_calls`` of an assistant message
``tool_result`` block                   a ``tool`` message
``thinking``, ``redacted_thinking``     ``thinking`` of an assistant message, verbatim
======================================  =========================================

A call and its result are one unit in the windows. The thinking blocks of a
turn that calls a tool are kept as they came, signature and all, and sent
back first in it: Anthropic requires them unchanged with the call while the
tool loop lasts (the thinking of a turn that ends in text it drops itself). Refusals are 400s naming
the field (``messages.2.content.0.type``), before anything is stored.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ctxwindow.messages import THINKING_FIELDS
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

ANTHROPIC_BLOCKS = ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking")
THINKING = THINKING_FIELDS  # a thinking block's type -> its fields


def from_anthropic(messages: Any, max_chars: int) -> list[Message]:
    """The chat messages of Anthropic ``messages``: a user message's ``tool_result`` blocks
    become ``tool`` messages (first, as Anthropic requires), an assistant's ``tool_use``
    blocks its ``tool_calls``."""
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "must be a non-empty array")
    out: list[Message] = []
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise bad(where, "must be an object")
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise bad(f"{where}.role", "must be user or assistant (the system prompt is 'system')")
        content = message.get("content")
        if isinstance(content, str):
            out.append(
                {"role": role, "content": checked_size(content, f"{where}.content", max_chars)}
            )
        elif isinstance(content, list) and content:
            blocks = [_block(b, f"{where}.content.{j}", role) for j, b in enumerate(content)]
            if sum(_block_chars(b) for b in blocks) > max_chars:
                raise too_large(f"{where}.content", max_chars)
            out.extend(_user(blocks, where) if role == "user" else [_assistant(blocks)])
        else:
            raise bad(f"{where}.content", "must be a string or a non-empty array of blocks")
    return out


def _block_chars(block: dict[str, Any]) -> int:
    if block["type"] == "text":
        return len(block["text"])
    if block["type"] == "tool_result":
        return len(chat_text(block["content"]))
    if block["type"] in THINKING:
        return sum(len(block[name]) for name in THINKING[block["type"]])
    return 0


def _block(block: Any, where: str, role: str) -> dict[str, Any]:
    """A content block checked, in the shape the converters read."""
    if not isinstance(block, dict):
        raise bad(where, "must be an object")
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": text(block.get("text"), f"{where}.text")}
    if kind == "image":
        return {"type": "image", "url": _image_url(block.get("source"), f"{where}.source")}
    if kind == "tool_use" and role == "assistant":
        arguments = block.get("input", {})
        if not isinstance(arguments, dict):
            raise bad(f"{where}.input", "must be an object")
        return {
            "type": "tool_use", "id": text(block.get("id"), f"{where}.id"),
            "name": text(block.get("name"), f"{where}.name"), "input": arguments,
        }  # fmt: skip
    if kind == "tool_result" and role == "user":
        return _tool_result(block, where)
    if kind in THINKING and role == "assistant":
        return {
            "type": kind,
            **{name: text(block.get(name), f"{where}.{name}") for name in THINKING[kind]},
        }
    if kind in ("tool_use", "tool_result", *THINKING):
        raise bad(f"{where}.type", f"{kind} blocks belong in {_OWNER[kind]} messages")
    raise bad(f"{where}.type", f"is {kind!r}: ctxwindow keeps {', '.join(ANTHROPIC_BLOCKS)} blocks")


_OWNER = {"tool_use": "assistant", "tool_result": "user", **dict.fromkeys(THINKING, "assistant")}


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    content = block.get("content", "")
    if isinstance(content, list):
        parts = []
        for j, inner in enumerate(content):
            checked = _block(inner, f"{where}.content.{j}", "user")
            if checked["type"] == "text":
                parts.append({"type": "text", "text": checked["text"]})
            elif checked["type"] == "image":
                parts.append({"type": "image_url", "image_url": {"url": checked["url"]}})
            else:
                raise bad(f"{where}.content.{j}.type", "must be text or image")
        content = parts
    elif not isinstance(content, str):
        raise bad(f"{where}.content", "must be a string or an array of blocks")
    if block.get("is_error") is not None and not isinstance(block["is_error"], bool):
        raise bad(f"{where}.is_error", "must be true or false")
    result = {
        "type": "tool_result", "id": text(block.get("tool_use_id"), f"{where}.tool_use_id"),
        "content": content,
    }  # fmt: skip
    if block.get("is_error"):
        result["is_error"] = True
    return result


_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def _image_url(source: Any, where: str) -> str:
    """An image source as the URL chat messages hold (a data: URL for base64 data)."""
    if isinstance(source, dict) and source.get("type") == "base64":
        media = text(source.get("media_type"), f"{where}.media_type")
        return f"data:{media};base64,{text(source.get('data'), f'{where}.data')}"
    if isinstance(source, dict) and source.get("type") == "url":
        return text(source.get("url"), f"{where}.url")
    raise bad(where, "must be a base64 or url image source")


def _user(blocks: list[dict[str, Any]], where: str) -> list[Message]:
    out: list[Message] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if block["type"] == "tool_result":
            if parts:
                raise bad(f"{where}.content.{j}", "is a tool_result after other blocks: a user"
                          " message's tool_result blocks come first")  # fmt: skip
            tool: Message = {
                "role": "tool",
                "tool_call_id": block["id"],
                "content": block["content"],
            }
            if block.get("is_error"):
                tool["is_error"] = True
            out.append(tool)
        elif block["type"] == "text":
            parts.append({"type": "text", "text": block["text"]})
        else:
            parts.append({"type": "image_url", "image_url": {"url": block["url"]}})
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _assistant(blocks: list[dict[str, Any]]) -> Message:
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    message: Message = {"role": "assistant", "content": text or None}
    calls = [_tool_call(b) for b in blocks if b["type"] == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    return with_thinking(message, blocks)


def with_thinking(message: Message, blocks: list[dict[str, Any]]) -> Message:
    """``message`` with the thinking blocks among ``blocks`` as its ``thinking``, verbatim,
    if it calls a tool: Anthropic needs them back with the call while the tool loop lasts,
    and drops the thinking of a turn that ended in text from later requests itself."""
    thinking = [dict(b) for b in blocks if b.get("type") in THINKING]
    if thinking and message.get("tool_calls"):
        message["thinking"] = thinking
    return message


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(block["input"], ensure_ascii=False)
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": arguments}}  # fmt: skip


LEFT_OUT: Message = {"role": "user", "content": "(earlier turns left out)"}
NOTED: Message = {"role": "assistant", "content": "(noted)"}
EMPTY = "(empty message)"  # a user turn with no text (Anthropic refuses empty content)


def to_anthropic(messages: list[Message]) -> tuple[list[dict[str, Any]], list[Message]]:
    """A built context as Anthropic (system blocks, messages): system messages go to
    ``system``; tool results into a user message; consecutive turns of a role merged.
    Anthropic's messages start with a user turn: a context whose window starts at an
    assistant's turn gets ``LEFT_OUT`` first (its tokens are kept free: ``messages.py``).
    So does an assistant's turn with thinking right after another's (the user's turn
    between them left out): merged, the thinking would not open the turn, as Anthropic
    requires. Blank text goes (Anthropic refuses a blank text block), a user turn with
    nothing left is ``EMPTY``, and a final assistant text loses its trailing whitespace
    (Anthropic refuses a prefill that ends in it)."""
    system: list[dict[str, Any]] = []
    out: list[Message] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            if text := chat_text(message.get("content")):
                system.append({"type": "text", "text": text})
            continue
        blocks = anthropic_blocks(message)
        if not blocks and role == "user":
            blocks = [{"type": "text", "text": EMPTY}]
        if not blocks:
            continue
        turn = "assistant" if role == "assistant" else "user"
        if turn == "assistant" and (not out or _thinks_after(out[-1], blocks)):
            out.append({"role": "user", "content": anthropic_blocks(LEFT_OUT)})
        if out and out[-1]["role"] == turn:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": turn, "content": blocks})
    return system, _no_trailing_space(out)


def closed(turns: list[Message]) -> list[Message]:
    """``turns`` (Anthropic messages) as a request with extended thinking needs them: the
    turn the request continues opens with thinking when it can.

    With thinking on, Anthropic takes the final assistant message, or the one whose
    tool uses the final user message answers, as the turn continued, which must then
    open with its thinking. A unit recalled from earlier turns (or written by the client
    without thinking) is history, not that turn. Placed right before the question, a
    tool unit would merge its results into the question's message: they stay in a user
    message of their own, ``NOTED`` answers them, and the question follows (its tokens
    are kept free: ``beside`` in ``anthropic.py``). A request of tool results only needs
    nothing here: recall puts history before the question that opened their loop
    (``context.recalling.opened``).
    """
    if len(turns) < 2:
        return turns
    last = turns[-1]
    if last["role"] == "user" and turns[-2]["role"] == "assistant" and not _opens(turns[-2]):
        results = [block for block in last["content"] if block["type"] == "tool_result"]
        rest = [block for block in last["content"] if block["type"] != "tool_result"]
        if results and rest:
            noted = {"role": "assistant", "content": anthropic_blocks(NOTED)}
            return [*turns[:-1], {"role": "user", "content": results}, noted,
                    {"role": "user", "content": rest}]  # fmt: skip
    return turns


def _opens(turn: Message) -> bool:
    """Whether an assistant message opens with thinking."""
    return bool(turn["content"]) and turn["content"][0]["type"] in THINKING


def _no_trailing_space(turns: list[Message]) -> list[Message]:
    """``turns`` whose final assistant text (a prefill) does not end in whitespace."""
    if not turns or turns[-1]["role"] != "assistant" or turns[-1]["content"][-1]["type"] != "text":
        return turns
    blocks = turns[-1]["content"]
    text = blocks[-1]["text"].rstrip()
    blocks[-1:] = [{**blocks[-1], "text": text}] if text else []
    return turns if blocks else turns[:-1]


def _thinks_after(turn: Message, blocks: list[dict[str, Any]]) -> bool:
    """Whether ``blocks`` open with thinking and would be merged into ``turn``."""
    return turn["role"] == "assistant" and blocks[0]["type"] in THINKING


def anthropic_blocks(message: Message) -> list[dict[str, Any]]:
    """The content blocks of a chat message (a tool message: its tool_result)."""
    role, content = message["role"], message.get("content")
    if role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result", "tool_use_id": message["tool_call_id"],
            "content": content if isinstance(content, str) else _anthropic_parts(content or []),
        }  # fmt: skip
        if message.get("is_error"):
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = [dict(b) for b in message.get("thinking") or ()]
    blocks += (
        [{"type": "text", "text": content}] if isinstance(content, str) and content.strip()
        else _anthropic_parts(content if isinstance(content, list) else [])
    )  # fmt: skip
    for call in message.get("tool_calls") or ():
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
             "input": _arguments(call["function"].get("arguments"))}
        )  # fmt: skip
    return blocks


def _anthropic_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if part.get("type") == "image_url":
            out.append({"type": "image", "source": _image_source(part["image_url"]["url"])})
        elif (text := part.get("text", part.get("refusal", ""))).strip():
            out.append({"type": "text", "text": text})  # Anthropic refuses blank text blocks
    return out


def _image_source(url: str) -> dict[str, Any]:
    found = _DATA_URL.fullmatch(url)
    if found:
        return {"type": "base64", "media_type": found[1], "data": found[2]}
    return {"type": "url", "url": url}


def _arguments(arguments: Any) -> dict[str, Any]:
    """A chat tool call's JSON arguments as ``tool_use.input`` (an object)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def anthropic_reply(data: Any) -> Message | None:
    """The assistant message of a Messages body (its text and tool_use blocks, and its
    thinking blocks verbatim); None if it has no ``content`` list of blocks."""
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        return None
    text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    calls = []
    for block in content:
        if block.get("type") == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                return None
            calls.append(_tool_call({**block, "input": block.get("input") or {}}))
    thinking = [b for b in content if b.get("type") in THINKING and _signed(b)]
    return with_thinking(assistant(text, calls), thinking)


def _signed(block: dict[str, Any]) -> bool:
    """Whether a thinking block has its fields as strings (else it is not kept)."""
    return all(isinstance(block.get(name), str) for name in THINKING[block["type"]])


def anthropic_usage(usage: Any) -> dict[str, Any] | None:
    """An Anthropic ``usage`` as calibration reads it: every input token, cached or not."""
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
        return None
    written, read = usage.get("cache_creation_input_tokens"), usage.get("cache_read_input_tokens")
    counts = [n for n in (written, read) if isinstance(n, int)]
    return prompt_usage(usage["input_tokens"] + sum(counts), read)


def with_breakpoint(
    system: list[dict[str, Any]], turns: list[Message], prefix: list[Message], before: int = 0
) -> None:
    """Mark with ``cache_control`` the last block of what ``prefix``, the stable prefix of
    the context ``system`` (after ``before`` blocks of the request's own) and ``turns`` were
    converted from (``to_anthropic``), becomes; not if the request already has Anthropic's
    limit of four breakpoints."""
    if _breakpoints([system, turns]) >= MAX_BREAKPOINTS:
        return
    head_system, head = to_anthropic(prefix)
    if head:
        block = turns[len(head) - 1]["content"][len(head[-1]["content"]) - 1]
    elif head_system or before:
        block = system[before + len(head_system) - 1]
    else:
        return
    block["cache_control"] = {"type": "ephemeral"}


MAX_BREAKPOINTS = 4


def _breakpoints(value: Any) -> int:
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(_breakpoints(v) for v in value.values())
    if isinstance(value, list):
        return sum(_breakpoints(v) for v in value)
    return 0
