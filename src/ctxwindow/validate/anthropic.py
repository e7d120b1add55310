"""Anthropic Messages: the rules of ``messages``, ``system`` and ``tools`` (docs/validate.md).

A ``tool_use`` is answered in the very next message, a user message whose
``tool_result`` blocks come first ("tool_use ids were found without
tool_result blocks immediately after", "unexpected tool_use_id found in
tool_result blocks"); nothing else in the request may sit in between. Roles
alternate from a first user turn: Anthropic's own API now merges consecutive
turns of one role and accepts a leading assistant turn, but Amazon Bedrock
still refuses both, as did the API before, and other hosts of the format may
lag it; docs/validate.md says why they are reported anyway. The blocks
themselves (text, thinking, cache breakpoints) are checked in
``anthropic_blocks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwindow.validate.anthropic_blocks import (
    Breakpoints,
    content_blocks,
    system,
    thinking_setting,
    tools,
)
from ctxwindow.validate.found import Found, kind, text_of
from ctxwindow.validate.rules import Violation

ROLES = ("user", "assistant")
Blocks = list[tuple[int, Mapping[str, Any]]]


@dataclass
class _Uses:
    """The ``tool_use`` blocks of one assistant message, and which of them are answered."""

    owner: int
    ids: dict[str, int] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)


def anthropic_messages(request: Any) -> list[Violation]:
    """The rules an Anthropic Messages request body breaks, in request order; empty when valid.

    Never raises: malformed input is reported under ``anthropic.shape``.

    >>> [v.rule for v in anthropic_messages({"messages": [
    ...     {"role": "assistant", "content": "Hello"},
    ...     {"role": "assistant", "content": "again"},
    ... ]})]
    ['anthropic.first_user', 'anthropic.alternation']
    """
    found = Found()
    if not isinstance(request, Mapping):
        found.add((-1,), "anthropic.shape", "request", f"expected an object, got {kind(request)}")
        return found.violations()
    cache = Breakpoints(found)
    tools(request.get("tools"), cache, found)
    system(request.get("system"), cache, found)
    messages = request.get("messages")
    if not isinstance(messages, list):
        found.add((-1,), "anthropic.shape", "messages", f"expected a list, got {kind(messages)}")
    elif not messages:
        found.add((-1,), "anthropic.shape", "messages", "empty: at least one message is required")
    else:
        _walk(messages, cache, found)
        thinking_setting(request, messages, found)
    return found.violations()


def _walk(messages: list[Any], cache: Breakpoints, found: Found) -> None:
    seen: set[str] = set()  # every tool_use id so far
    uses: _Uses | None = None  # the previous message's tool_use blocks
    previous: str | None = None
    for index, message in enumerate(messages):
        role = _role(index, message, found)
        final = index == len(messages) - 1
        blocks = content_blocks(index, message, role, final, cache, found)
        _order(index, role, previous, found)
        if role == "user":
            _results(index, blocks, uses, found)
        _unanswered(uses, found)
        uses = _uses(index, blocks, seen, found) if role == "assistant" else None
        previous = role
    _unanswered(uses, found)


def _role(index: int, message: Any, found: Found) -> str | None:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        found.add((2, index), "anthropic.shape", where, f"expected an object, got {kind(message)}")
        return None
    role = text_of(message.get("role"))
    if role is None:
        found.add((2, index), "anthropic.shape", where, "no string 'role'")
    elif role == "system":
        found.add(
            (2, index), "anthropic.roles", where, "a system message: use the top-level 'system'"
        )
    elif role not in ROLES:
        found.add((2, index), "anthropic.roles", where, f"unknown role {role!r}: user or assistant")
    return role if role in ROLES else None


def _order(index: int, role: str | None, previous: str | None, found: Found) -> None:
    where = f"messages[{index}]"
    if index == 0 and role == "assistant":
        found.add((2, index), "anthropic.first_user", where, "the first message is the assistant's")
    if role is not None and role == previous:
        found.add((2, index), "anthropic.alternation", where, f"a second {role} message in a row")


def _results(index: int, blocks: Blocks, uses: _Uses | None, found: Found) -> None:
    """Match a user message's tool_result blocks to the tool_use blocks just before it."""
    other_first = False
    for at, block in blocks:
        if block.get("type") != "tool_result":
            other_first = True
            continue
        where = f"messages[{index}].content[{at}]"
        if other_first:
            found.add(
                (2, index, at), "anthropic.tool_result_first", where, "after a non-result block"
            )
        tool_use_id = text_of(block.get("tool_use_id"))
        if tool_use_id is None:
            continue  # reported as anthropic.shape
        if uses is None or tool_use_id not in uses.ids:
            found.add(
                (2, index, at),
                "anthropic.tool_result_has_use",
                where,
                f"tool_result for {tool_use_id!r}: no such tool_use in messages[{index - 1}]",
            )
        elif tool_use_id in uses.answered:
            found.add(
                (2, index, at), "anthropic.tool_result_has_use", where, f"{tool_use_id!r} again"
            )
        else:
            uses.answered.add(tool_use_id)


def _uses(index: int, blocks: Blocks, seen: set[str], found: Found) -> _Uses:
    uses = _Uses(index)
    for at, block in blocks:
        tool_use_id = text_of(block.get("id")) if block.get("type") == "tool_use" else None
        if tool_use_id is None:
            continue
        if tool_use_id in seen:
            found.add(
                (2, index, at),
                "anthropic.tool_use_ids_unique",
                f"messages[{index}].content[{at}]",
                f"tool_use id {tool_use_id!r} was used before",
            )
        seen.add(tool_use_id)
        uses.ids.setdefault(tool_use_id, at)
    return uses


def _unanswered(uses: _Uses | None, found: Found) -> None:
    if uses is None:
        return
    for tool_use_id, at in uses.ids.items():
        if tool_use_id not in uses.answered:
            found.add(
                (2, uses.owner, at),
                "anthropic.tool_use_answered",
                f"messages[{uses.owner}].content[{at}]",
                f"no tool_result for {tool_use_id!r} in the next message",
            )
