"""What ``PriorityWindow`` makes of a victim instead of losing it: a smaller form, or a summary.

``shrink`` asks the compressor for a smaller form of a unit's entries
(``shrink_alone``: of a message too big for the whole window). ``Folds``
gathers evicted entries into batches, and ``fold`` asks the summarizer to
fold a batch into the rolling summary. These only compute: the window
decides when to call them and puts what they return in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow.messages import Entry, Unit
from ctxwindow.policies.rules import Priority, check_count

Compressor = Callable[[Sequence[Entry], int], list[Entry]]
Summarizer = Callable[[Entry | None, Sequence[Entry], int], Entry]
SUMMARY_ROOM = 16  # tokens: below, a summary is not worth making


@dataclass(frozen=True)
class Folding:
    """What a ``PriorityWindow`` makes of a victim instead of losing it.

    - ``compressor``: gives a victim above ``compress_threshold`` tokens a
      smaller form that stays in the window;
    - ``summarizer``: folds evicted units into one rolling summary of at most
      ``summary_tokens``, in batches of ``fold_tokens`` (None: half the
      summary, at least 64), since each fold re-summarizes the summary.

    Checked once, here: a bad value raises ``ValueError`` naming its field.

    >>> Folding(summary_tokens=400).batch_tokens
    200
    >>> Folding(summary_tokens=-1)
    Traceback (most recent call last):
    ValueError: summary_tokens must be a non-negative integer, got -1
    """

    compressor: Compressor | None = None
    compress_threshold: int = 2000
    summarizer: Summarizer | None = None
    summary_tokens: int = 800
    fold_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_callable("compressor", self.compressor)
        _check_callable("summarizer", self.summarizer)
        check_count("compress_threshold", self.compress_threshold, least=0)
        check_count("summary_tokens", self.summary_tokens, least=0)
        if self.fold_tokens is not None:
            check_count("fold_tokens", self.fold_tokens, least=1)

    @property
    def batch_tokens(self) -> int:
        """Evicted tokens to gather before a fold: ``fold_tokens``, or half the summary."""
        return (
            self.fold_tokens if self.fold_tokens is not None else max(64, self.summary_tokens // 2)
        )


def _check_callable(field: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise ValueError(f"{field} must be callable or None, got {value!r}")


def shrink(
    compressor: Compressor,
    unit: Unit,
    target: int,
    measure: Callable[[Sequence[Entry]], int],
) -> tuple[list[Entry], int] | None:
    """The unit's entries compressed to at most ``target`` and their size, or None.

    None when the unit was compressed once already (it goes now), or when the
    compressor cannot bring it within ``target`` or below its present size.
    """
    if any("compressed" in e.metadata for e in unit.entries):
        return None
    entries = compressor(unit.entries, target)
    size = measure(entries)
    if size > target or size >= unit.size or any(map(emptied, entries)):
        return None
    return entries, size


def shrink_alone(compressor: Compressor, entry: Entry, room: int) -> Entry | None:
    """A message too big for any window compressed to fit ``room`` tokens, or None."""
    if room <= 0:
        return None
    [less] = compressor([entry], room)
    return less if less.tokens <= room and not emptied(less) else None


def emptied(entry: Entry) -> bool:
    """Whether compression left a message with nothing to send: no text, no tool calls
    (providers refuse an empty message; the unit goes instead)."""
    message = entry.message
    if message.get("tool_calls") or message.get("role") == "tool":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return not content.strip()
    return not any(
        part.get("type") == "image_url" or str(part.get("text", part.get("refusal", ""))).strip()
        for part in content or ()
    )


class Folds:
    """Evicted entries waiting to be folded into the rolling summary.

    Each fold re-summarizes the summary, so evictions are folded in batches.
    """

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.tokens = 0

    def add(self, units: Sequence[Unit]) -> None:
        self.entries.extend(entry for unit in units for entry in unit.entries)
        self.tokens += sum(unit.size for unit in units)

    def take(self) -> list[Entry]:
        """The batch, which starts again empty."""
        entries, self.entries, self.tokens = self.entries, [], 0
        return entries

    def clear(self) -> None:
        self.take()


def fold(
    summarizer: Summarizer, old: Unit | None, entries: Sequence[Entry], room: int
) -> Unit | None:
    """The rolling summary with ``entries`` folded in, pinned and CRITICAL, or None.

    None when ``room`` is too small to be worth a summary, or when the
    summarizer overshoots it (ignored rather than break the budget).
    """
    if room < SUMMARY_ROOM:
        return None
    entry = summarizer(old.entries[0] if old else None, entries, room)
    entry.seq, entry.kind, entry.pinned = -1, "summary", True
    entry.priority = int(Priority.CRITICAL)
    if entry.tokens > room:
        return None
    return Unit([entry], entry.tokens, priority=int(Priority.CRITICAL), category="summary")
