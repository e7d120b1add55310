"""LangChain messages to chat wire format and back: ``to_openai`` / ``from_openai``.

Roles, content parts, names, tool calls and their ids survive the round trip;
what the wire format lacks is said in ``to_openai``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.messages.tool import invalid_tool_call, tool_call

from ctxwindow.errors import InvalidMessageError
from ctxwindow.messages import Entry, Message
from ctxwindow.policies import Context

_PARTS = ("text", "image_url", "refusal")
# Parts with nothing a chat-completions model can be sent again: provider-private reasoning,
# and tool calls that ``tool_calls`` already carries.
_UNSENDABLE_PARTS = ("reasoning", "thinking", "redacted_thinking", "tool_use", "function_call")


def to_openai(message: BaseMessage) -> Message:
    """The chat wire-format dict of a LangChain message (``from_openai`` reverses it).

    String content stays a string and a list of parts stays a list (text and
    image parts; Anthropic, Bedrock and standard image blocks become
    ``image_url`` parts); ``tool_calls`` get JSON string arguments, invalid
    tool calls keep their raw arguments; ``name``, ``tool_call_id`` and a
    ``developer`` role are kept. Reasoning blocks are left out (no other model
    can read them back); other parts the wire format lacks (audio, files)
    raise ``InvalidMessageError``. Ids, ``response_metadata`` and a tool
    result's ``artifact`` and ``status`` are not part of the wire format.
    """
    converted: Message = convert_to_openai_messages(message, text_format="block")
    content = message.content
    if isinstance(content, str):
        converted["content"] = content
    else:
        converted["content"] = _sendable_parts(converted["content"])
    if isinstance(message, AIMessage) and message.invalid_tool_calls:
        converted["tool_calls"] = [*converted.get("tool_calls", ()), *_raw_calls(message)]
    return converted


def _sendable_parts(parts: list[Any]) -> list[Any]:
    kept = []
    for part in parts:
        kind = part.get("type")
        if kind in _PARTS:
            kept.append(part)
        elif kind not in _UNSENDABLE_PARTS:
            raise InvalidMessageError(
                f"a content part of type {kind!r} has no chat wire format (known: {_PARTS})"
            )
    return kept


def _raw_calls(message: AIMessage) -> list[Message]:
    return [
        {
            "type": "function",
            "id": call.get("id") or "",
            "function": {"name": call.get("name") or "", "arguments": call.get("args") or ""},
        }
        for call in message.invalid_tool_calls
    ]


def from_openai(message: Mapping[str, Any], *, id: str | None = None) -> BaseMessage:
    """The LangChain message of a chat wire-format dict (``to_openai`` reverses it).

    ``id`` becomes the message's id (the history gives each its entry id).
    """
    role = message["role"]
    content = _content_of(message.get("content"))
    common: dict[str, Any] = {"content": content, "id": id}
    if isinstance(message.get("name"), str):
        common["name"] = message["name"]
    if role in ("system", "developer"):
        extra = {"__openai_role__": "developer"} if role == "developer" else {}
        return SystemMessage(**common, additional_kwargs=extra)
    if role == "user":
        return HumanMessage(**common)
    if role == "assistant":
        return _ai_message(message, common)
    if role == "tool":
        return ToolMessage(**common, tool_call_id=message["tool_call_id"])
    if role == "function":
        return FunctionMessage(**{"name": "", **common})
    raise InvalidMessageError(f"unknown role {role!r}")


def _content_of(content: Any) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return [json.loads(json.dumps(part)) for part in content]  # a copy, not the store's


def _ai_message(message: Mapping[str, Any], common: dict[str, Any]) -> AIMessage:
    calls, invalid = [], []
    for call in message.get("tool_calls") or ():
        name, arguments = call["function"]["name"], call["function"].get("arguments") or ""
        args = _arguments(arguments)
        if args is None:
            invalid.append(invalid_tool_call(name=name, args=arguments, id=call["id"], error=None))
        else:
            calls.append(tool_call(name=name, args=args, id=call["id"]))
    extra = {"refusal": message["refusal"]} if message.get("refusal") else {}
    return AIMessage(
        **common, tool_calls=calls, invalid_tool_calls=invalid, additional_kwargs=extra
    )


def _arguments(arguments: str) -> dict[str, Any] | None:
    """A tool call's arguments as LangChain holds them (a dict), or None if they are not."""
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def from_entries(entries: Iterable[Entry]) -> list[BaseMessage]:
    """The messages of stored entries, each with its entry's id."""
    return [from_openai(entry.message, id=entry.id) for entry in entries]


def from_context(context: Context) -> list[BaseMessage]:
    """The messages of a built context."""
    return [from_openai(message) for message in context.messages]
