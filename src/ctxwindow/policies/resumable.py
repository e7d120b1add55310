"""The checkpoint half of every window: its state as data, and a fresh window carried on from it.

``ResumableWindow`` writes what a window configured alike needs to carry on
exactly as this one (``checkpoint``: the kept units in order, compressed
forms included, the system prompt, the running totals) and takes it up in a
fresh window (``resume``), refusing a checkpoint written by another
configuration (``fingerprint``). The data's format is policies/checkpoint.py's.
A window rebuilt from the newest entries of a long session counts the older
ones as left out (``left_out``). ``Window`` (policies/base.py) is one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from ctxwindow.messages import Entry, Unit
from ctxwindow.policies import checkpoint
from ctxwindow.policies.checkpoint import CheckpointError
from ctxwindow.policies.view import WindowView


def stored_kind(entry: Entry) -> str | None:
    """The kind to give again when a stored entry is restored; None lets the window infer it
    (``chat`` is the default, and a ``summary`` is the window's own)."""
    return entry.kind if entry.kind not in ("chat", "summary") else None


class ResumableWindow(WindowView):
    """What a window carries on from without replaying its history (``Window`` sets these
    fields and defines the two hooks)."""

    model: str
    oversize: str
    _tools: list[Mapping[str, Any]]
    _dropped_calls: set[str]  # calls whose unit was dropped: their results are dropped too

    @abstractmethod
    def _resume_unit(self, unit: Unit) -> None:
        """Take note of a unit kept again from a checkpoint (as ``_track`` would)."""

    @abstractmethod
    def clear(self) -> None:
        """Forget every message except the system prompt."""

    def fingerprint(self) -> str:
        """What a checkpoint of this window must have been written by: the window's
        class and configuration (budget, tokenizer, oversize policy, tools...)."""
        return checkpoint.fingerprint(self._configuration())

    def _configuration(self) -> list[Any]:
        tools = checkpoint.fingerprint([sorted(map(repr, self._tools))])
        parts = [checkpoint.VERSION, type(self).__qualname__, self._budget, self.model]
        parts += [self.tokenizer.model, self.oversize, tools, self._size_of_name()]
        return parts if self.low_water is None else [*parts, self.low_water]

    def _size_of_name(self) -> str:
        return type(self)._size_of.__qualname__

    def checkpoint(self) -> dict[str, Any]:
        """The window's state as JSON-able data, for ``resume`` in a fresh window.

        What a window configured alike needs to carry on exactly as this one:
        the kept units in order (compressed forms included), the system prompt,
        the running totals. Not the report's log of past decisions.
        """
        kept = self._kept
        return {
            "version": checkpoint.VERSION,
            "window": self.fingerprint(),
            "next_seq": self._next_seq,
            "system": checkpoint.entry_state(kept.system.entries[0]) if kept.system else None,
            "units": [checkpoint.unit_state(unit) for unit in kept.units.values()],
            "open": self._open.seq if self._open is not None else None,
            "dropped_calls": sorted(self._dropped_calls),
            "evicted": [self._journal.evicted_entries, self._journal.evicted_tokens],
        }

    def resume(self, state: Any) -> None:
        """Carry on from ``state`` (a ``checkpoint()``); this window must be fresh.

        ``CheckpointError`` (nothing changed) if the checkpoint was written by a
        window configured otherwise, or does not add up.
        """
        state = checkpoint.check_version(state, self.fingerprint())
        if self._kept.count or self._kept.system is not None or self._next_seq:
            raise CheckpointError("resume() needs a fresh window")
        try:
            self._resume(state)
            if self._kept.used > self._budget:
                raise CheckpointError("the checkpoint holds more than the budget")
        except CheckpointError:
            self._reset()
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._reset()
            raise CheckpointError(f"the checkpoint does not add up: {exc!r}") from exc

    def _resume(self, state: Mapping[str, Any]) -> None:
        system = state.get("system")
        if system is not None:
            entry = checkpoint.entry_from_state(system)
            self._kept.set_system(Unit([entry], self._size_of(entry)))
        for data in checkpoint.field(state, "units", list):
            self._resume_unit(self._unit_from(data))
        self._next_seq = int(checkpoint.field(state, "next_seq", int))
        open_seq = state.get("open")
        if open_seq is not None:
            self._open = self._kept.units[int(open_seq)]
        self._dropped_calls = set(map(str, checkpoint.field(state, "dropped_calls", list)))
        entries, tokens = state.get("evicted") or (0, 0)  # the report's running totals
        self._journal.evicted_entries, self._journal.evicted_tokens = int(entries), int(tokens)

    def _unit_from(self, data: Mapping[str, Any]) -> Unit:
        """A unit of a checkpoint, kept again; its size must be what this window measures."""
        entries = [checkpoint.entry_from_state(e) for e in checkpoint.field(data, "entries", list)]
        if not entries:
            raise CheckpointError("a checkpoint unit has no entries")
        unit = Unit(
            entries[:1], self._size_of(entries[0]), set(map(str, data.get("pending") or ())),
            priority=int(data.get("priority", 0)), category=str(data.get("category", "chat")),
        )  # fmt: skip
        self._kept.add(unit)
        for entry in entries[1:]:
            self._kept.grow(unit, entry, self._size_of(entry))
        if unit.size != data.get("size"):
            raise CheckpointError(f"a checkpoint unit measures {unit.size}, not {data.get('size')}")
        return unit

    def _reset(self) -> None:
        """Empty the window again after a failed ``resume``."""
        self._kept.system = None
        self.clear()
        self._next_seq = 0

    def left_out(self, entries: int, tokens: int) -> None:
        """Count ``entries`` messages of the history (``tokens`` stored tokens) as left
        out before the window began: a cold load that replays only the newest entries.
        A report counts them as evicted, ``earlier`` (not itemised)."""
        if entries < 0 or tokens < 0:
            raise ValueError(f"left_out takes counts, got {entries} entries, {tokens} tokens")
        self._journal.evicted_entries += entries
        self._journal.evicted_tokens += tokens
