"""Strict role alternation for open-model chat templates (docs/models.md).

Some chat templates (Llama 2, Mistral, and vLLM serving them) reject a
conversation whose roles do not alternate after the system prompt: two user
messages in a row, two assistant messages in a row, or a first message that
is not the user's. Eviction and stored turns produce exactly that, so
``alternate`` makes a built context acceptable. It is for what is sent to the
model, never for the stored history:

- ``"merge"`` joins consecutive messages of one role into one message;
- ``"bridge"`` merges nothing and puts a short placeholder between them.

Both modes put a ``BRIDGE_USER`` message before a conversation that starts
with the assistant. The assistant side is an assistant message or a tool
unit (a call and its results) and may run on: assistant → tool → assistant
is accepted, assistant → assistant is not. System and developer messages
stay first and untouched in both modes.

>>> alternate([{"role": "assistant", "content": "Hi!"}], "bridge")
[{'role': 'user', 'content': '(continued)'}, {'role': 'assistant', 'content': 'Hi!'}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.errors import InvalidMessageError, OrphanToolResultError
from ctxwindow.messages import SYSTEM_ROLES, Message

STRICT_MODES = ("merge", "bridge")

BRIDGE_USER = "(continued)"
"""The content of a user message inserted before a leading assistant message or,
in bridge mode, between two assistant messages."""

BRIDGE_ASSISTANT = "(noted)"
"""The content of an assistant message inserted between two user messages (bridge mode)."""

Origin = tuple[int, ...]
"""The input indexes one output message came from: one, several (merged) or none (inserted)."""

_RESULT_ROLES = ("tool", "function")
_ASSISTANT_SIDE = ("assistant", *_RESULT_ROLES)

# Which roles a message of each role may directly follow; "system" also stands
# for the start of the conversation.
_MAY_FOLLOW: dict[str, tuple[str, ...]] = {
    **{role: SYSTEM_ROLES for role in SYSTEM_ROLES},
    "user": (*SYSTEM_ROLES, *_ASSISTANT_SIDE),
    "assistant": ("user", *_RESULT_ROLES),
    **{role: _ASSISTANT_SIDE for role in _RESULT_ROLES},
}

# Bridge mode: what goes between two messages of the same role.
_BRIDGES = {"user": ("assistant", BRIDGE_ASSISTANT), "assistant": ("user", BRIDGE_USER)}


def is_alternating(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether strict templates accept the roles of ``messages`` as they are.

    True for: system/developer messages first (any number), then a user
    message, then sides that alternate, the assistant side being assistant
    messages and tool results with no two assistant messages adjacent. One
    pass, nothing copied: cheap enough to skip ``alternate`` when it is true.
    """
    previous = "system"
    for message in messages:
        role: str = message.get("role", "")
        if previous not in _MAY_FOLLOW.get(role, ()):
            return False
        previous = role
    return True


def alternate(messages: Sequence[Mapping[str, Any]], mode: str) -> list[Message]:
    """A copy of ``messages`` whose roles alternate as strict templates require.

    ``mode`` is ``"merge"`` (consecutive user messages, or consecutive
    assistant messages, become one; contents joined with a blank line, or as
    one list of parts when either is a list; ``None`` contents skipped; a
    merged message keeps only role, content, every tool call and a name all
    its messages share; tool results are never merged) or
    ``"bridge"`` (a ``BRIDGE_ASSISTANT`` message between two user messages, a
    ``BRIDGE_USER`` message between two assistant messages). Both insert a
    ``BRIDGE_USER`` message before a leading assistant message. Nothing is
    reordered or dropped, tool units stay whole, the input is not changed,
    and a context that already alternates comes back equal (new dicts, their
    contents shared). ``alternate_with_trace`` also tells which messages were
    inserted or merged.

    Raises ``ValueError`` for an unknown mode or a system message after the
    conversation started, ``OrphanToolResultError`` for a tool result that
    does not follow an assistant message.
    """
    return alternate_with_trace(messages, mode)[0]


def alternate_with_trace(
    messages: Sequence[Mapping[str, Any]], mode: str
) -> tuple[list[Message], list[Origin]]:
    """``alternate``, and for each output message the input indexes it came from.

    >>> user = {"role": "user", "content": "a"}
    >>> out, trace = alternate_with_trace([user, user], "bridge")
    >>> [m["content"] for m in out], trace
    (['a', '(noted)', 'a'], [(0,), (), (1,)])
    >>> alternate_with_trace([user, user], "merge")[1]
    [(0, 1)]
    """
    if mode not in STRICT_MODES:
        raise ValueError(f"unknown alternation mode {mode!r}: expected one of {STRICT_MODES}")
    head = _system_prefix_length(messages)
    out = [dict(messages[i]) for i in range(head)]
    trace: list[Origin] = [(i,) for i in range(head)]
    join = _merge if mode == "merge" else _bridge
    for index in range(head, len(messages)):
        message = messages[index]
        _check_place(messages, index, head)
        if len(out) == head and message["role"] != "user":
            _insert(out, trace, "user", BRIDGE_USER)
        join(out, trace, message, index)
    return out, trace


def _system_prefix_length(messages: Sequence[Mapping[str, Any]]) -> int:
    head = 0
    while head < len(messages) and messages[head].get("role") in SYSTEM_ROLES:
        head += 1
    return head


def _check_place(messages: Sequence[Mapping[str, Any]], index: int, head: int) -> None:
    """Refuse what no placeholder or merge can make acceptable without reordering."""
    role = messages[index].get("role")
    if role in SYSTEM_ROLES:
        raise ValueError(
            f"message {index} is a {role} message after the conversation started; "
            "alternate() never reorders, so system and developer messages must come first"
        )
    if role not in _BRIDGES and role not in _RESULT_ROLES:
        raise InvalidMessageError(f"message {index}: unknown role {role!r}")
    if role in _RESULT_ROLES and (
        index == head or messages[index - 1].get("role") not in _ASSISTANT_SIDE
    ):
        raise OrphanToolResultError(
            f"message {index} is a {role} result that does not follow the assistant "
            "message that called it"
        )


def _insert(out: list[Message], trace: list[Origin], role: str, content: str) -> None:
    out.append({"role": role, "content": content})
    trace.append(())


def _bridge(
    out: list[Message], trace: list[Origin], message: Mapping[str, Any], index: int
) -> None:
    role = message["role"]
    if role in _BRIDGES and out and out[-1]["role"] == role:
        _insert(out, trace, *_BRIDGES[role])
    out.append(dict(message))
    trace.append((index,))


def _merge(out: list[Message], trace: list[Origin], message: Mapping[str, Any], index: int) -> None:
    role = message["role"]
    if role in _BRIDGES and out and out[-1]["role"] == role:
        out[-1] = _merged(out[-1], message)
        trace[-1] += (index,)
    else:
        out.append(dict(message))
        trace.append((index,))


def _merged(first: Mapping[str, Any], second: Mapping[str, Any]) -> Message:
    """One message of both: contents joined, every tool call, the name if they share it."""
    merged: Message = {
        "role": first["role"],
        "content": _joined(first.get("content"), second.get("content")),
    }
    # Only the later one has tool calls in a valid context (the earlier one's
    # results would sit between them); keeping both never drops a call.
    calls = [*(first.get("tool_calls") or ()), *(second.get("tool_calls") or ())]
    if calls:
        merged["tool_calls"] = calls
    name = first.get("name")
    if name is not None and name == second.get("name"):
        merged["name"] = name
    return merged


def _joined(first: Any, second: Any) -> Any:
    if first is None:
        return second
    if second is None:
        return first
    if isinstance(first, str) and isinstance(second, str):
        return "\n\n".join(text for text in (first, second) if text) or first
    return [*_parts(first), *_parts(second)]


def _parts(content: str | list[Any]) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)
