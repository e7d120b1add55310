"""What converting either public benchmark shares: the result, the shape checks, the rules.

A converter (``locomo``, ``longmemeval``) raises ``Malformed`` for a file, a
sample or an instance that is not the benchmark's shape; ``convert_items``
turns each item into a conversation of the questions evidence recall can
measure, and collects the rest as problems and notes (see ``loaders``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# A marker key of each format, to recognize a file given under the other prefix.
_FORMATS = {
    "locomo": ("LoCoMo", "conversation"),
    "longmemeval": ("LongMemEval", "haystack_sessions"),
}
_KINDS: dict[str, Any] = {
    "a string": str,
    "a list": list,
    "an object": Mapping,
    "an integer": int,
    "a string or a number": (str, int, float),
}


class Malformed(Exception):
    """The file, a sample or an instance is not the benchmark's shape; the text says where."""


@dataclass
class Conversion:
    """A benchmark file in the dataset format of docs/eval.md, and what was left out."""

    conversations: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed samples or instances
    notes: list[str] = field(default_factory=list)  # questions left out on purpose
    unanswerable: int = 0  # unanswerable questions left out


def benchmark_items(data: Any, kind: str) -> list[Any]:
    """The file's list of samples or instances; ``Malformed`` unless it looks like ``kind``."""
    name, marker = _FORMATS[kind]
    if _looks_like(data, marker):
        return list(data)
    hint = "".join(
        f"; it looks like a {other} file: use {prefix}:PATH"
        for prefix, (other, key) in _FORMATS.items()
        if prefix != kind and _looks_like(data, key)
    )
    raise Malformed(f"not a {name} file: expected a JSON list of objects with {marker!r}{hint}")


def _looks_like(data: Any, marker: str) -> bool:
    return isinstance(data, list) and any(isinstance(x, Mapping) and marker in x for x in data)


def convert_items(
    items: list[Any],
    noun: str,
    id_key: str,
    convert_one: Callable[[Any], dict[str, Any]],
    unanswerable: Callable[[Mapping[str, Any]], bool],
    include_unanswerable: bool,
) -> Conversion:
    """Each item as a conversation of its measurable questions; malformed ones as problems."""
    conversion = Conversion()
    for index, item in enumerate(items):
        try:
            conversation = convert_one(item)
        except Malformed as exc:
            name = item.get(id_key) if isinstance(item, Mapping) else None
            named = f" ({name!r})" if isinstance(name, str) else ""
            conversion.problems.append(f"{noun} {index}{named}: {exc}")
            continue
        skip = None if include_unanswerable else unanswerable
        _add_measurable(conversation, conversion, skip)
    return conversion


def _add_measurable(
    conversation: dict[str, Any],
    conversion: Conversion,
    skip: Callable[[Mapping[str, Any]], bool] | None,
) -> None:
    """Add ``conversation`` with the questions evidence recall can measure; note the others.

    ``skip`` says which unanswerable questions to leave out (only counted).
    """
    ids = {message["id"] for message in conversation["messages"]}
    kept = []
    for question in conversation["questions"]:
        note = _unmeasurable(question, ids)
        if skip is not None and skip(question):
            conversion.unanswerable += 1
        elif note is not None:
            conversion.notes.append(note)
        else:
            kept.append(question)
    if kept:
        conversion.conversations.append({**conversation, "questions": kept})


def _unmeasurable(question: Mapping[str, Any], ids: set[str]) -> str | None:
    """Why evidence recall cannot measure ``question``, or None if it can."""
    at = f"question {question['id']!r} ({question['category']})"
    if not question["evidence"]:
        return f"{at}: no evidence turn in the file; left out"
    missing = [e for e in question["evidence"] if e not in ids]
    if missing:
        return f"{at}: evidence {missing} not among the conversation's turns; left out"
    return None


def session_messages(
    messages: list[dict[str, Any]], header: str, when: datetime | None
) -> list[Any]:
    """A session's messages: ``header`` before the first one's content, all with ``when``."""
    if messages:
        messages[0]["content"] = header + messages[0]["content"]
    if when is not None:
        for message in messages:
            message["timestamp"] = when.isoformat()
    return messages


def parse_time(text: str, layout: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), layout)
    except ValueError:
        return None


def value_of(raw: Any, key: str, kind: str, where: str = "", *, optional: bool = False) -> Any:
    """``raw[key]`` if it is ``kind`` (None if absent and ``optional``), else ``Malformed``."""
    if not isinstance(raw, Mapping):
        raise Malformed(f"{where}must be an object, got {type(raw).__name__}")
    value = raw.get(key)
    if value is None and optional:
        return None
    if key not in raw:
        raise Malformed(f"{where}{key!r} is missing")
    check_kind(value, kind, f"{where}{key!r}")
    return value


def check_kind(value: Any, kind: str, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, _KINDS[kind]):
        raise Malformed(f"{what} must be {kind}, got {type(value).__name__}")
