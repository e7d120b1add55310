"""A window's state as JSON-able data, and a fresh window carried on from it.

Rebuilding a window by adding a long session's stored entries again costs
the whole history (every eviction, compression and fold replayed). A
checkpoint is what that replay ends in: the kept units in order (compressed
forms included), the system prompt and the rolling summary, the evicted
entries waiting to be folded, the call waiting for results, and the running
totals. ``resume`` puts it into a fresh window of the same configuration,
which then carries on exactly as the window that wrote it: the same
messages, tokens and evictions for whatever is added next.

What is not kept: the report's log of past decisions (a resumed window's
report starts its story at the checkpoint; its totals carry on). A
checkpoint names the configuration that wrote it (``fingerprint``); another
configuration refuses it, and so does a checkpoint whose totals do not add
up (``CheckpointError``): the caller then replays the entries instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry, Unit

VERSION = 1


class CheckpointError(CtxWindowError, ValueError):
    """A checkpoint this window cannot carry on from (another configuration, or damaged)."""


def fingerprint(parts: Sequence[Any]) -> str:
    """A short digest of a window's configuration, stable across processes.

    Each part is described by its ``repr`` unless it is a function or an
    object without a stable one: those by their qualified name. A part whose
    description holds a memory address (``0x…``) makes every process differ,
    so its windows never share checkpoints (safe, if wasteful).
    """
    text = "\x1f".join(_described(part) for part in parts)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _described(part: Any) -> str:
    owner = getattr(part, "__self__", None)  # a bound method: its object's type and its name
    if owner is not None and callable(part):
        return f"{type(owner).__qualname__}.{getattr(part, '__name__', '?')}"
    if part is None or isinstance(part, (str, int, float, bool, tuple, list, dict)):
        return repr(part)
    if getattr(type(part), "__repr__", None) is object.__repr__:  # "<… at 0x…>"
        return type(part).__qualname__
    return repr(part)


def entry_state(entry: Entry) -> dict[str, Any]:
    return {
        "message": entry.message,
        "tokens": entry.tokens,
        "seq": entry.seq,
        "id": entry.id,
        "pinned": entry.pinned,
        "priority": entry.priority,
        "kind": entry.kind,
        "created_at": entry.created_at,
        "metadata": {k: _plain(v) for k, v in entry.metadata.items()},
    }


def _plain(value: Any) -> Any:
    """A metadata value as JSON can hold it (a lazy sequence of ids becomes a list)."""
    if isinstance(value, Sequence) and not isinstance(value, (str, list, tuple, bytes)):
        return list(value)
    return value


def entry_from_state(data: Mapping[str, Any]) -> Entry:
    try:
        return Entry(
            message=dict(data["message"]),
            tokens=int(data["tokens"]),
            seq=int(data["seq"]),
            id=str(data["id"]),
            pinned=bool(data["pinned"]),
            priority=int(data["priority"]),
            kind=str(data["kind"]),
            created_at=float(data["created_at"]),
            metadata=dict(data["metadata"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"a checkpoint entry is damaged: {exc!r}") from exc


def unit_state(unit: Unit) -> dict[str, Any]:
    return {
        "entries": [entry_state(entry) for entry in unit.entries],
        "size": unit.size,
        "pending": sorted(unit.pending),
        "priority": unit.priority,
        "category": unit.category,
    }


def field(state: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``state[name]``, which must be of ``kind``; else ``CheckpointError``."""
    value = state.get(name)
    if not isinstance(value, kind):
        raise CheckpointError(f"a checkpoint's {name!r} is missing or damaged")
    return value


def check_version(state: Any, expected: str) -> Mapping[str, Any]:
    """``state`` if it is a checkpoint of this format written by a window configured as
    ``expected`` (its ``fingerprint``)."""
    if not isinstance(state, Mapping) or state.get("version") != VERSION:
        raise CheckpointError("not a checkpoint of this version of ctxwindow")
    if state.get("window") != expected:
        raise CheckpointError("the checkpoint was written by a window configured otherwise")
    return state
