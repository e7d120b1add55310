"""Anthropic Messages: the rules of content blocks, ``system``, ``tools`` and thinking.

What breaks a request inside a message: an empty turn ("all messages must
have non-empty content except for the optional final assistant message"), a
blank text block ("text content blocks must contain non-whitespace text"), a
prefill ending in whitespace, a fifth ``cache_control`` breakpoint ("A
maximum of 4 blocks with cache_control may be provided"), and thinking handled
carelessly: an assistant message with thinking that does not start with it
("If an assistant message contains any thinking blocks, the first block must
be thinking or redacted_thinking"), a block stripped of its ``signature``,
or, with thinking enabled, the turn being continued sent without its thinking
("a final assistant message must start with a thinking block"). Blocks of
other kinds (documents, search results, server tools) pass unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwindow.validate.found import Found, Place, get, items, kind, text_of

CACHE_BREAKPOINTS = 4
THINKING = ("thinking", "redacted_thinking")
_SEALS = {"thinking": "signature", "redacted_thinking": "data"}
# Fields a block of these types must have, and their JSON types.
_FIELDS: dict[str, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    "text": (("text", str),),
    "image": (("source", Mapping),),
    "document": (("source", Mapping),),
    "tool_use": (("id", str), ("name", str), ("input", Mapping)),
    "tool_result": (("tool_use_id", str),),
    "thinking": (("thinking", str),),
}
# Blocks only one side may send.
_SIDE = {"tool_use": "assistant", "tool_result": "user", **dict.fromkeys(THINKING, "assistant")}


class Breakpoints:
    """Counts ``cache_control`` breakpoints in request order and reports those past the 4th."""

    def __init__(self, found: Found) -> None:
        self._found = found
        self._count = 0

    def see(self, place: Place, where: str, block: Any) -> None:
        if get(block, "cache_control") is None:
            return
        self._count += 1
        if self._count > CACHE_BREAKPOINTS:
            self._found.add(
                place,
                "anthropic.cache_control_limit",
                where,
                f"cache_control breakpoint {self._count}: at most {CACHE_BREAKPOINTS} are allowed",
            )


def tools(listed: Any, cache: Breakpoints, found: Found) -> None:
    """Check ``tools``: a list of objects; count their breakpoints."""
    if listed is not None and not isinstance(listed, list):
        found.add((-1,), "anthropic.shape", "tools", f"expected a list, got {kind(listed)}")
    for index, tool in enumerate(items(listed)):
        if not isinstance(tool, Mapping):
            found.add((0, index), "anthropic.shape", f"tools[{index}]", "expected an object")
        cache.see((0, index), f"tools[{index}]", tool)


def system(prompt: Any, cache: Breakpoints, found: Found) -> None:
    """Check ``system``: a string or a list of non-blank text blocks; count their breakpoints."""
    if prompt is not None and not isinstance(prompt, str | list):
        found.add(
            (-1,), "anthropic.shape", "system", f"expected a string or list, got {kind(prompt)}"
        )
    for index, block in enumerate(items(prompt)):
        where = f"system[{index}]"
        text = text_of(get(block, "text"))
        if get(block, "type") != "text" or text is None:
            found.add((1, index), "anthropic.shape", where, "expected a text block")
        elif not text.strip():
            found.add((1, index), "anthropic.text_not_blank", where, "a blank text block")
        cache.see((1, index), where, block)


def content_blocks(
    index: int, message: Any, role: str | None, final: bool, cache: Breakpoints, found: Found
) -> list[tuple[int, Mapping[str, Any]]]:
    """A message's well-typed blocks with their indexes, once its content is checked."""
    content = get(message, "content")
    prefill = final and role == "assistant"
    if isinstance(content, str):
        _string_content(index, content, prefill, found)
        return []
    if not isinstance(content, list):
        if isinstance(message, Mapping):
            problem = f"'content' must be a string or a list of blocks, got {kind(content)}"
            found.add((2, index), "anthropic.shape", f"messages[{index}]", problem)
        return []
    if not content and not prefill:
        found.add((2, index), "anthropic.content_not_empty", f"messages[{index}]", "no content")
    blocks = [
        (at, block)
        for at, block in enumerate(content)
        if _block(index, at, block, role, cache, found)
    ]
    if role == "assistant":
        _thinking(index, blocks, found)
    if prefill and blocks:
        at, last = blocks[-1]
        _prefill_end((2, index, at), f"messages[{index}].content[{at}]", last.get("text"), found)
    return blocks


def _string_content(index: int, content: str, prefill: bool, found: Found) -> None:
    where = f"messages[{index}]"
    if not content:
        if not prefill:
            found.add((2, index), "anthropic.content_not_empty", where, "empty content")
    elif not content.strip():
        found.add((2, index), "anthropic.text_not_blank", where, "content is only whitespace")
    elif prefill:
        _prefill_end((2, index), where, content, found)


def _prefill_end(place: Place, where: str, text: Any, found: Found) -> None:
    """A final assistant message (a prefill) may not end with whitespace."""
    if isinstance(text, str) and text.strip() and text != text.rstrip():
        found.add(
            place, "anthropic.text_not_blank", where, "a final assistant text ends with whitespace"
        )


def _block(
    index: int, at: int, block: Any, role: str | None, cache: Breakpoints, found: Found
) -> bool:
    """Check one block's shape and text; count its breakpoints; whether it is well typed."""
    where = f"messages[{index}].content[{at}]"
    place = (2, index, at)
    block_type = text_of(get(block, "type"))
    if block_type is None:
        problem = "no string 'type'" if isinstance(block, Mapping) else f"got a {kind(block)}"
        found.add(place, "anthropic.shape", where, f"expected a block: {problem}")
        return False
    cache.see(place, where, block)
    for key, expected in _FIELDS.get(block_type, ()):
        if not isinstance(block.get(key), expected):
            found.add(place, "anthropic.shape", where, f"a {block_type} block needs {key!r}")
    side = _SIDE.get(block_type, role)
    if role is not None and side != role:
        found.add(
            place, "anthropic.shape", where, f"only {side} messages carry {block_type} blocks"
        )
    if block_type == "text" and isinstance(block.get("text"), str) and not block["text"].strip():
        found.add(place, "anthropic.text_not_blank", where, "a blank text block")
    if block_type in _SEALS and not text_of(block.get(_SEALS[block_type])):
        seal = _SEALS[block_type]
        found.add(
            place, "anthropic.thinking_signed", where, f"a {block_type} block without {seal!r}"
        )
    if block_type == "tool_result":
        _nested(index, at, block.get("content"), cache, found)
    return True


def _nested(index: int, at: int, content: Any, cache: Breakpoints, found: Found) -> None:
    """A tool_result's own content: a string or blocks, which may carry breakpoints too."""
    where = f"messages[{index}].content[{at}]"
    if content is not None and not isinstance(content, str | list):
        found.add((2, index, at), "anthropic.shape", where, "tool_result 'content' is not a list")
    for inner, block in enumerate(items(content)):
        cache.see((2, index, at, inner), f"{where}.content[{inner}]", block)


def _thinking(index: int, blocks: list[tuple[int, Mapping[str, Any]]], found: Found) -> None:
    """An assistant message with thinking starts with it and does not end with it."""
    kinds = [block["type"] for _, block in blocks]
    if not blocks or not any(kind_ in THINKING for kind_ in kinds):
        return
    where = f"messages[{index}].content"
    if kinds[0] not in THINKING:
        at = blocks[0][0]
        found.add(
            (2, index, at),
            "anthropic.thinking_first",
            f"{where}[{at}]",
            f"a message with thinking blocks starts with a {kinds[0]} block",
        )
    if kinds[-1] in THINKING:
        at = blocks[-1][0]
        found.add(
            (2, index, at),
            "anthropic.thinking_not_last",
            f"{where}[{at}]",
            f"the message ends with a {kinds[-1]} block",
        )


def thinking_setting(request: Mapping[str, Any], messages: list[Any], found: Found) -> None:
    """The turn a request continues carries thinking exactly when ``thinking`` is on: with it
    on, that assistant message starts with its thinking; with it off, a final one has none."""
    enabled = get(request.get("thinking"), "type") in ("enabled", "adaptive")
    target = _continued_turn(messages)
    if target is None:
        return
    content = get(messages[target], "content")
    thinking = [at for at, block in enumerate(items(content)) if get(block, "type") in THINKING]
    where = f"messages[{target}]"
    if enabled and not thinking:
        problem = "thinking is enabled, but the assistant turn it continues has no thinking block"
        found.add((2, target), "anthropic.thinking_continued", where, problem)
    elif not enabled and thinking and target == len(messages) - 1:
        problem = "thinking is disabled, but the final assistant message carries thinking"
        found.add((2, target, thinking[0]), "anthropic.thinking_continued", where, problem)


def _continued_turn(messages: list[Any]) -> int | None:
    """The assistant message a request continues: the final one, or the one whose tool_use
    blocks the final user message answers."""
    last = len(messages) - 1
    role = get(messages[last], "role") if messages else None
    if role == "assistant":
        return last
    answers = any(
        get(block, "type") == "tool_result" for block in items(get(messages[last], "content"))
    )
    if role == "user" and answers and last and get(messages[last - 1], "role") == "assistant":
        return last - 1
    return None
