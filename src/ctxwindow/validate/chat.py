"""OpenAI Chat Completions: the rules of a ``messages`` list (docs/validate.md).

The rule that breaks most often after a trim or a summary is the tool block:
an assistant message with ``tool_calls`` must be followed, straight away, by
one ``tool`` message per call id, and a ``tool`` message is only valid inside
such a block. OpenAI's 400s say so: "An assistant message with 'tool_calls'
must be followed by tool messages responding to each 'tool_call_id'", and
"messages with role 'tool' must be a response to a preceeding message with
'tool_calls'". One pass keeps the open block (the last assistant's call ids)
and closes it at the first message that is not a tool result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwindow.validate.found import Found, get, items, kind, text_of
from ctxwindow.validate.rules import Violation

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
CALL_TYPES = ("function", "custom")
# An assistant message may stand without content when it carries one of these instead.
_CONTENT_STAND_INS = ("tool_calls", "refusal", "audio", "function_call")


@dataclass
class _Block:
    """The calls of one assistant message, and which of them tool messages answered so far."""

    owner: int
    calls: dict[str, int] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)


def chat_completions(request: Any) -> list[Violation]:
    """The rules a Chat Completions request breaks, in request order; empty when valid.

    ``request`` is the body (a mapping with ``messages``) or the messages alone.
    Never raises: malformed input is reported under ``chat.shape``.

    >>> call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    >>> [v.rule for v in chat_completions([
    ...     {"role": "user", "content": "hi"},
    ...     {"role": "assistant", "content": None, "tool_calls": [call]},
    ... ])]
    ['chat.tool_call_answered']
    """
    found = Found()
    messages = _messages(request, found)
    block: _Block | None = None
    for index, message in enumerate(messages):
        role = _role(index, message, found)
        if role == "tool":
            _answer(index, message, block, found)
            continue
        _close(block, found)
        block = _open(index, message, found) if role == "assistant" else None
    _close(block, found)
    return found.violations()


def _messages(request: Any, found: Found) -> list[Any]:
    if isinstance(request, Mapping):
        messages = request.get("messages")
    elif isinstance(request, list):
        messages = request
    else:
        found.add((-1,), "chat.shape", "request", f"expected an object, got {kind(request)}")
        return []
    if not isinstance(messages, list):
        found.add((-1,), "chat.shape", "messages", f"expected a list, got {kind(messages)}")
        return []
    if not messages:
        found.add((-1,), "chat.shape", "messages", "empty: at least one message is required")
    return messages


def _role(index: int, message: Any, found: Found) -> str | None:
    """The message's role if it is one, after reporting what is malformed about it."""
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        found.add((index,), "chat.shape", where, f"expected an object, got {kind(message)}")
        return None
    role = text_of(message.get("role"))
    if role is None:
        found.add((index,), "chat.shape", where, "no string 'role'")
    elif role not in ROLES:
        found.add((index,), "chat.roles", where, f"unknown role {role!r}: one of {ROLES}")
        return None
    _content_shape(index, message, role, found)
    if role == "tool" and text_of(message.get("tool_call_id")) is None:
        found.add((index,), "chat.shape", where, "a tool message needs a string 'tool_call_id'")
    if role != "assistant" and "tool_calls" in message:
        found.add((index,), "chat.shape", where, f"a {role} message cannot carry 'tool_calls'")
    return role


def _content_shape(index: int, message: Mapping[str, Any], role: str | None, found: Found) -> None:
    where = f"messages[{index}]"
    content = message.get("content")
    if content is None and role not in ("assistant", None):
        found.add((index,), "chat.shape", where, f"a {role} message needs 'content'")
    elif content is not None and not isinstance(content, str | list):
        found.add((index,), "chat.shape", where, f"'content' is a {kind(content)}")
    for at, part in enumerate(items(content)):
        if text_of(get(part, "type")) is None:
            found.add((index, -1, at), "chat.shape", f"{where}.content[{at}]", "no string 'type'")


def _open(index: int, message: Mapping[str, Any], found: Found) -> _Block:
    """The block an assistant message opens: its call ids, checked one by one."""
    block = _Block(index)
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        found.add((index,), "chat.shape", f"messages[{index}]", "'tool_calls' is not a list")
    elif calls == []:
        found.add((index,), "chat.shape", f"messages[{index}]", "'tool_calls' is empty")
    for at, call in enumerate(items(calls)):
        call_id = _call_id(index, at, call, found)
        if call_id is None:
            continue
        if call_id in block.calls:
            where = f"messages[{index}].tool_calls[{at}]"
            found.add((index, at), "chat.tool_call_ids_unique", where, f"id {call_id!r} repeats")
        block.calls.setdefault(call_id, at)
    if not any(message.get(key) for key in _CONTENT_STAND_INS) and not message.get("content"):
        found.add(
            (index,),
            "chat.assistant_not_empty",
            f"messages[{index}]",
            "an assistant message with neither content nor tool_calls",
        )
    return block


def _call_id(index: int, at: int, call: Any, found: Found) -> str | None:
    """A tool call's id, after reporting what is malformed about the call."""
    problem = _call_problem(call)
    if problem is not None:
        found.add((index, at), "chat.shape", f"messages[{index}].tool_calls[{at}]", problem)
    return text_of(get(call, "id"))


def _call_problem(call: Any) -> str | None:
    if not isinstance(call, Mapping):
        return f"expected an object, got {kind(call)}"
    if text_of(call.get("id")) is None:
        return "no string 'id'"
    call_type = call.get("type")
    if call_type not in CALL_TYPES:
        return f"'type' is {call_type!r}, not one of {CALL_TYPES}"
    spec = call.get(call_type)
    if text_of(get(spec, "name")) is None:
        return f"'{call_type}' needs a string 'name'"
    if call_type == "function" and text_of(get(spec, "arguments")) is None:
        return "'function' needs 'arguments' as a JSON string"
    return None


def _answer(index: int, message: Any, block: _Block | None, found: Found) -> None:
    """File a tool message under the open block, or report it as out of place."""
    call_id = text_of(get(message, "tool_call_id"))
    if call_id is None:
        return  # reported as chat.shape
    where = f"messages[{index}]"
    if block is None:
        found.add(
            (index,),
            "chat.tool_result_follows_call",
            where,
            f"tool result for {call_id!r} does not follow an assistant message with tool_calls",
        )
    elif call_id not in block.calls:
        found.add(
            (index,),
            "chat.tool_result_follows_call",
            where,
            f"tool result for {call_id!r}, which messages[{block.owner}] did not call",
        )
    elif call_id in block.answered:
        found.add((index,), "chat.tool_result_once", where, f"{call_id!r} is answered again")
    else:
        block.answered.add(call_id)


def _close(block: _Block | None, found: Found) -> None:
    """Report the calls of a block that ended without their tool messages."""
    if block is None:
        return
    for call_id, at in block.calls.items():
        if call_id not in block.answered:
            found.add(
                (block.owner, at),
                "chat.tool_call_answered",
                f"messages[{block.owner}].tool_calls[{at}]",
                f"no tool message answers {call_id!r} right after messages[{block.owner}]",
            )
