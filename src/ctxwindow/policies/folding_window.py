"""The folding half of ``PriorityWindow``: a victim made smaller rather than lost.

``FoldingWindow`` applies a ``Folding`` (policies/folding.py, which only
computes): a message too big for the whole budget is compressed before the
oversize policy applies; a victim above ``compress_threshold`` tokens is
compressed in place when that frees enough; evicted units gather into
batches (``fold_tokens``) that the summarizer folds into one rolling
summary, pinned after the system prompt. ``PriorityWindow``
(policies/priority.py) is the window to use: it adds priorities, caps and the
order of victims, and keeps its totals per category as units change here
(``_replace``, ``_set_summary``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwindow.messages import Entry, Unit
from ctxwindow.policies.folding import Folding, Folds, fold, shrink, shrink_alone
from ctxwindow.policies.journal import DRAWS_ON
from ctxwindow.policies.rules import text_of
from ctxwindow.policies.token_window import TokenWindow


class FoldingWindow(TokenWindow):
    """A token window that compresses its victims or folds them into a rolling summary.

    ``PriorityWindow``'s base: it calls ``_set_folding`` and sets ``_folds``.
    """

    _folds: Folds  # evicted, not yet in the summary

    def _set_folding(self, folding: Folding) -> None:
        """What a victim becomes instead of leaving: smaller, or part of the summary."""
        self.folding = folding
        self.compressor, self.compress_threshold = folding.compressor, folding.compress_threshold
        self.summarizer, self.summary_tokens = folding.summarizer, folding.summary_tokens
        self.fold_tokens = folding.batch_tokens

    def _fit_oversize(self, entries: list[Entry], entry: Entry, room: int) -> Entry | None:
        """Compress a message that alone is too big before the oversize policy applies."""
        size = self._measure(entries)
        if size > room and self.compressor is not None:
            less = shrink_alone(self.compressor, entry, room - (size - entry.tokens))
            if less is not None:
                self._compressed(entry, less, "larger than the whole budget")
                return less
        return super()._fit_oversize(entries, entry, room)

    def _compress(self, unit: Unit, room: int, cause: str) -> bool:
        """Compress a unit above the threshold to fit ``room``; True if it stays, smaller."""
        if self.compressor is None or unit.size <= self.compress_threshold:
            return False
        target = max(1, min(self.compress_threshold, room))
        found = shrink(self.compressor, unit, target, self._measure)
        if found is None:
            return False
        entries, size = found
        for old, new in zip(unit.entries, entries, strict=False):
            if new is not old:
                self._compressed(old, new, cause)
        self._replace(unit, entries, size)
        return True

    def _replace(self, unit: Unit, entries: list[Entry], size: int) -> None:
        """Put a victim's smaller ``entries`` (``size`` in all) in its place."""
        self._kept.replace(unit, entries, size)

    def _compressed(self, old: Entry, new: Entry, cause: str) -> None:
        self._journal.compressed(old, new, cause)
        if self.on_event is not None:
            self.on_event("compressed", 1)

    def _evicted(self, units: list[Unit], cause: str = "over budget") -> None:
        super()._evicted(units, cause)
        if self.summarizer is not None:
            self._folds.add(units)
            # Stepping, each step is its own batch: the summary changes with the step.
            if self._folds.tokens >= self.fold_tokens or self.low_water is not None:
                self._fold()

    def _fold(self) -> None:
        """Fold the evicted entries waiting for it into the rolling summary."""
        entries, old = self._folds.take(), self._kept.summary
        room = self._budget - (self._kept.pinned_used - (old.size if old else 0))
        room = min(self.summary_tokens, room)
        unit = fold(self.summarizer, old, entries, room) if self.summarizer else None
        if unit is None:
            return
        _read_drawn_on(old, unit, entries)
        self._set_summary(old, unit)
        self._journal.summarized(entries)
        if self.on_event is not None:
            self.on_event("summary_updated", 1)
        if self._kept.used > self._budget:
            self._evict_until_fits()

    def _set_summary(self, old: Unit | None, new: Unit) -> None:
        """Make ``new`` the rolling summary, in place of ``old``."""
        self._kept.set_summary(new)


def _read_drawn_on(old: Unit | None, new: Unit, entries: Sequence[Entry]) -> None:
    """What a summary draws on, read by the marks rule when its summarizer did not say
    (``RollingSummary`` does), so the report claims no more than the text holds."""
    entry = new.entries[0]
    if DRAWS_ON in entry.metadata:
        return
    # Only for such a summarizer: a window without one never loads the compressors.
    from ctxwindow.compress.rolling import CREDITS, credit, credited_ids

    before = old.entries[0].metadata.get(CREDITS) if old is not None else None
    said = ((e.id, text_of(e.message)) for e in entries)
    credits = credit(text_of(entry.message), before, said)
    entry.metadata = {**entry.metadata, DRAWS_ON: credited_ids(credits), CREDITS: credits}
