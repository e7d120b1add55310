"""Structured compression of JSON tool outputs: keep ids and status, drop bulk."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ctxwindow.compress.base import content_targets, total_tokens, with_content
from ctxwindow.compress.jsonshrink import Shape, shrink_json
from ctxwindow.errors import CompressionError
from ctxwindow.messages import Entry
from ctxwindow.tokens.chat import ChatTokenizer

MIN_STRING = 16
_NOT_JSON = object()


class Structured:
    """Shrink ``tool`` messages whose content is a JSON object or array.

    Other entries (and tool output that is not JSON, or JSON in a ```json
    fence that does not parse) are returned unchanged, so a ``Chain`` falls
    through. The output is compact, valid JSON (``ensure_ascii=False``),
    shrunk progressively — fewer array items and shorter strings, first with
    every field, then with only ids, status-like fields and non-empty
    containers (see :mod:`ctxwindow.compress.jsonshrink`) — until it fits its
    share of the target; if nothing fits, the smallest form is returned.
    When the tool's function name is known (the assistant call among the
    given entries, or ``metadata["tool_name"]``) and the message carries no
    ``name``, an object output gains a leading ``"_tool"`` field.
    """

    name = "structured"

    def __init__(self, tokenizer: ChatTokenizer, max_items: int = 3, max_string: int = 200) -> None:
        if max_items < 0 or max_string < 1:
            raise CompressionError(
                f"need max_items >= 0 and max_string >= 1, got {max_items}, {max_string}"
            )
        self.tokenizer = tokenizer
        self.max_items = max_items
        self.max_string = max_string

    def __call__(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]:
        if total_tokens(entries) <= target_tokens:
            return list(entries)
        values = [parse_tool_json(entry) for entry in entries]
        eligible = [value is not _NOT_JSON for value in values]
        rooms = content_targets(entries, target_tokens, self.tokenizer, eligible)
        names = _call_names(entries)
        return [
            self._shrink(entry, value, room, _tool_name(entry, names)) if ok else entry
            for entry, value, room, ok in zip(entries, values, rooms, eligible, strict=True)
        ]

    def _shrink(self, entry: Entry, value: Any, room: int, tool: str | None) -> Entry:
        smallest: tuple[int, str] | None = None
        for shape in self.shapes():
            text = dump_json(_label(shrink_json(value, shape), tool))
            tokens = self.tokenizer.text(text)
            if tokens <= room:
                return with_content(entry, text, self.tokenizer, self.name)
            if smallest is None or tokens < smallest[0]:
                smallest = (tokens, text)
        assert smallest is not None
        return with_content(entry, smallest[1], self.tokenizer, self.name)

    def shapes(self) -> Iterator[Shape]:
        """The shrink schedule, mildest first."""
        strings = _ladder(self.max_string, min(MIN_STRING, self.max_string), lambda n: n // 2)
        for all_keys, floor in ((True, min(1, self.max_items)), (False, 0)):
            items = _ladder(self.max_items, floor, lambda n: n - 1)
            for step in range(max(len(items), len(strings))):
                yield Shape(
                    items[min(step, len(items) - 1)], strings[min(step, len(strings) - 1)], all_keys
                )


def parse_tool_json(entry: Entry) -> Any:
    """The JSON object or array a tool message carries, or ``_NOT_JSON``."""
    content = entry.message.get("content")
    if entry.message.get("role") != "tool" or not isinstance(content, str):
        return _NOT_JSON
    text = _unfence(content.strip())
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON
    return value if isinstance(value, (dict, list)) else _NOT_JSON


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _unfence(text: str) -> str:
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        return text[text.index("\n") + 1 : -3]
    return text


def _ladder(start: int, floor: int, step: Callable[[int], int]) -> list[int]:
    values = [start]
    while values[-1] > floor:
        values.append(max(step(values[-1]), floor))
    return values


def _call_names(entries: Sequence[Entry]) -> dict[str, str]:
    """Tool call id → function name, from the assistant calls among ``entries``."""
    return {
        call["id"]: call["function"]["name"]
        for entry in entries
        for call in entry.message.get("tool_calls") or ()
        if isinstance(call.get("function", {}).get("name"), str)
    }


def _tool_name(entry: Entry, names: dict[str, str]) -> str | None:
    if "name" in entry.message:
        return None  # the message already says it
    name = names.get(entry.message.get("tool_call_id", ""), entry.metadata.get("tool_name"))
    return name if isinstance(name, str) else None


def _label(value: Any, tool: str | None) -> Any:
    if tool is None or not isinstance(value, dict) or "_tool" in value:
        return value
    return {"_tool": tool, **value}
