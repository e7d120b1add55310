"""Shrinking a parsed JSON value to a ``Shape``, keeping what a model needs.

What stays whole: ids (keys ``id``, ``ids``, ``uuid``, ``*_id``, ``*_ids``,
``*Id``; uuid-like strings anywhere) and status-like fields (``status``,
``error``, ``message``, ``code``, ``ok``...; their nested values are shrunk
like any other). What shrinks:

- an array longer than ``max_items`` becomes
  ``{"_len": N, "_first": [its first max_items items, shrunk]}``, plus
  ``"_errors": [{"_index": i, ...}]`` for failed records further on (a
  record with an ``error``/``errors`` value, ``ok``/``success`` false, or a
  failing ``status``);
- a string longer than ``max_string`` keeps its start and ends with
  ``…[+N chars]``;
- with ``all_keys=False``, other scalar fields are dropped (the bulk), and
  objects and arrays are kept only if something is left in them;
- below ``MAX_DEPTH`` levels, an object becomes ``{"_keys": N}`` and an
  array ``{"_len": N}``.

>>> shrink_json({"id": 7, "rows": [1, 2, 3, 4], "note": "x" * 30}, Shape(2, 10, all_keys=True))
{'id': 7, 'rows': {'_len': 4, '_first': [1, 2]}, 'note': 'xxxxxxxxxx…[+20 chars]'}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 16
STATUS_KEYS = frozenset(
    [
        "status",
        "state",
        "error",
        "errors",
        "message",
        "msg",
        "code",
        "ok",
        "success",
        "detail",
        "reason",
        "warning",
        "warnings",
        "result",
        "name",
        "title",
        "type",
        "kind",
        "total",
        "count",
        "function",
        "tool",
    ]
)
ID_KEYS = frozenset({"id", "ids", "uuid", "guid"})
FAILED_STATUSES = frozenset({"error", "failed", "failure", "fail"})
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_CAMEL_ID = re.compile(r"[a-z0-9](?:Id|ID|Ids|IDs)$")


@dataclass(frozen=True)
class Shape:
    """How far to shrink: array items kept, string length kept, whether bulk fields stay."""

    max_items: int
    max_string: int
    all_keys: bool = True


def is_id_key(key: str) -> bool:
    folded = key.casefold()
    return (
        folded in ID_KEYS or folded.endswith(("_id", "_ids", "-id")) or bool(_CAMEL_ID.search(key))
    )


def is_uuid(value: Any) -> bool:
    return isinstance(value, str) and bool(_UUID.fullmatch(value))


def is_failed(item: Any) -> bool:
    """Whether a record reports a failure."""
    if not isinstance(item, dict):
        return False
    status = item.get("status", item.get("state"))
    return (
        bool(item.get("error") or item.get("errors"))
        or item.get("ok") is False
        or item.get("success") is False
        or (isinstance(status, str) and status.casefold() in FAILED_STATUSES)
        or (isinstance(status, int) and not isinstance(status, bool) and status >= 400)
    )


def shrink_json(value: Any, shape: Shape, depth: int = 0) -> Any:
    """``value`` shrunk to ``shape`` (a new value; the input is not changed)."""
    if isinstance(value, dict):
        return _shrink_object(value, shape, depth)
    if isinstance(value, list):
        return _shrink_array(value, shape, depth)
    if isinstance(value, str):
        return cut_string(value, shape.max_string)
    return value


def cut_string(text: str, max_chars: int) -> str:
    if len(text) <= max_chars or is_uuid(text):
        return text
    return f"{text[:max_chars]}…[+{len(text) - max_chars} chars]"


def _shrink_object(obj: dict[str, Any], shape: Shape, depth: int) -> dict[str, Any]:
    if depth >= MAX_DEPTH:
        return {"_keys": len(obj)}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if is_uuid(value) or (is_id_key(key) and not isinstance(value, (dict, list))):
            out[key] = value
        elif shape.all_keys or key.casefold() in STATUS_KEYS or is_id_key(key):
            out[key] = shrink_json(value, shape, depth + 1)
        elif isinstance(value, (dict, list)):
            small = shrink_json(value, shape, depth + 1)
            if small:
                out[key] = small
    return out


def _shrink_array(array: list[Any], shape: Shape, depth: int) -> Any:
    if depth >= MAX_DEPTH:
        return {"_len": len(array)}
    head = [shrink_json(item, shape, depth + 1) for item in array[: shape.max_items]]
    if len(array) <= shape.max_items:
        return head
    summary: dict[str, Any] = {"_len": len(array)}
    first = [item for item in head if item != {}]
    if first:
        summary["_first"] = first
    errors = _failed_records(array, shape, depth)
    if errors:
        summary["_errors"] = errors
    return summary


def _failed_records(array: list[Any], shape: Shape, depth: int) -> list[dict[str, Any]]:
    """The first failed records after the head, shrunk, with their index."""
    limit = max(shape.max_items, 1)
    found: list[dict[str, Any]] = []
    for index in range(shape.max_items, len(array)):
        if len(found) == limit:
            break
        if is_failed(array[index]):
            found.append({"_index": index, **shrink_json(array[index], shape, depth + 1)})
    return found
