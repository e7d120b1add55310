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

Housekeeping that cannot do its work says so, in ``Report.compaction``, and
tries again at its next turn (nothing is switched off for good): a fold
whose summarizer raised, or came out over its room, or that had no room,
leaves its batch evicted, each row saying why; a fold while a tool call
waits for its results (never evicted) keeps its batch for the next fold
when the call leaves it too little room; a summary that is its summarizer's
fallback says why (``LLMSummarizer``: the model's summary was not used);
and a window still over budget with nothing it may evict says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from ctxwindow.messages import Entry, Unit
from ctxwindow.policies.explain import Report
from ctxwindow.policies.folding import SUMMARY_ROOM, Folding, Folds, fold, shrink, shrink_alone
from ctxwindow.policies.journal import DRAWS_ON, fallback_of
from ctxwindow.policies.rules import text_of
from ctxwindow.policies.token_window import TokenWindow

logger = logging.getLogger("ctxwindow.policies")
WAITS = (
    "the rolling summary waits: a tool call waiting for its results leaves it {room:,} "
    "tokens; {n:,} evicted message(s) wait to be folded"
)
NOT_UPDATED = "the rolling summary was not updated: {why}"
STUCK = "over budget by {over:,} tokens with nothing left it may evict ({what})"


class FoldingWindow(TokenWindow):
    """A token window that compresses its victims or folds them into a rolling summary.

    ``PriorityWindow``'s base: it calls ``_set_folding`` and sets ``_folds``.
    """

    _folds: Folds  # evicted, not yet in the summary
    _summary_note: str | None = None  # why the last fold fell short (None: it did not)

    def _set_folding(self, folding: Folding) -> None:
        """What a victim becomes instead of leaving: smaller, or part of the summary."""
        self.folding = folding
        self.compressor, self.compress_threshold = folding.compressor, folding.compress_threshold
        self.summarizer, self.summary_tokens = folding.summarizer, folding.summary_tokens
        self.fold_tokens = folding.batch_tokens

    def _fit_oversize(self, entries: list[Entry], entry: Entry, room: int) -> Entry | None:
        """Compress a message that alone is too big before the oversize policy applies: a
        user turn (the question, sent as fully as it can be) to fit the room, any other
        to the compression threshold, as a victim would be (compressed to fill the room,
        it would take the place of the newest messages before it, and could not be
        compressed again to keep them)."""
        size = self._measure(entries)
        if size > room and self.compressor is not None:
            joined = size - entry.tokens  # (a tool result joins its call's unit)
            own, least = room - joined, self.compress_threshold - joined
            smaller = entry.message["role"] != "user" and 0 < least < own
            targets = [least, own] if smaller else [own]
            for target in targets:
                less = shrink_alone(self.compressor, entry, target)
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
        """Fold the evicted entries waiting for it into the rolling summary, or say why not."""
        old, waiting = self._kept.summary, self._waiting_call()
        room = self._summary_room(old, waiting)
        if room < SUMMARY_ROOM and waiting is not None:
            # The call cannot be evicted and its results are due: the batch waits for it.
            self._summary_note = WAITS.format(room=max(room, 0), n=len(self._folds.entries))
            return
        entries = self._folds.take()
        unit = self._folded(old, entries, room)
        if unit is None:
            return
        why = fallback_of(unit.entries[0])
        self._summary_note = None if why is None else f"rolling summary: {why}"
        _read_drawn_on(old, unit, entries)
        self._set_summary(old, unit)
        self._journal.summarized(entries)
        if self.on_event is not None:
            self.on_event("summary_updated", 1)
        if self._kept.used > self._budget:
            self._evict_until_fits()

    def _folded(self, old: Unit | None, entries: list[Entry], room: int) -> Unit | None:
        """The new summary of ``old`` and ``entries`` within ``room``, or None: the
        entries then stay evicted, their rows and ``compaction`` saying why."""
        if self.summarizer is None:
            return None
        if room < SUMMARY_ROOM:
            why = f"its room is {max(room, 0):,} tokens (a summary needs {SUMMARY_ROOM})"
        else:
            try:
                unit = fold(self.summarizer, old, entries, room)
            except Exception as exc:  # a summarizer may raise anything: the turn goes on
                logger.warning("the rolling summary failed (%r); its batch is not folded", exc)
                why = f"the summarizer failed: {exc!r}"
            else:
                if unit is not None:
                    return unit
                why = f"the summary came out over its room of {room:,} tokens"
        self._summary_note = NOT_UPDATED.format(why=why)
        self._journal.not_folded(entries, why)
        return None

    def _waiting_call(self) -> Unit | None:
        """The tool call waiting for its results, unless pinned (then counted as such)."""
        unit = self._open
        return unit if unit is not None and not unit.pinned else None

    def _summary_room(self, old: Unit | None, waiting: Unit | None) -> int:
        """What the summary may take: its cap, and what the budget leaves beside the other
        pinned messages and a tool call waiting for its results (neither is evicted)."""
        room = self._budget - (self._kept.pinned_used - (old.size if old else 0))
        return min(self.summary_tokens, room - (waiting.size if waiting else 0))

    @property
    def compaction(self) -> str | None:
        """What keeps the housekeeping from doing its work now (``Report.compaction``): the
        last fold's shortfall, and being over budget with nothing it may evict."""
        notes = [self._summary_note] if self._summary_note else []
        if (over := self._kept.used - self._budget) > 0:
            held = "a tool call waiting for its results" if self._open else "the newest turn"
            notes.append(STUCK.format(over=over, what=f"pinned messages, {held}"))
        return "; ".join(notes) or None

    def _report(self, budget: int, left: Sequence[Unit], tokens: int) -> Report:
        report = super()._report(budget, left, tokens)
        compaction = self.compaction
        return report if compaction is None else replace(report, compaction=compaction)

    def clear(self) -> None:
        super().clear()
        self._summary_note = None

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
