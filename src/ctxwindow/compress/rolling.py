"""A rolling summary of evicted history that keeps facts, folded in incrementally.

The summary is a list of facts: sentences (or parts of long ones) of the
evicted turns, each with its speaker and, when known, its date, written one
line per turn in the order of the conversation::

    Summary of earlier conversation:
    [8 May 2023] Caroline: I went to a LGBTQ support group yesterday.
    Melanie: I painted that lake sunrise last year. … It's in the hall.
    [25 May 2023] Melanie: We're going camping in June.

A fold reads the newly evicted turns (:mod:`ctxwindow.compress.turns`),
takes the facts already in the summary from its metadata, and keeps the
best of both that fit (:mod:`ctxwindow.compress.selection`): small talk is
never kept; when the summary is full, the least fact-dense pieces go first,
and among equals the oldest. Nothing is cut inside a piece to fit, so no
line is ever a cut marker. A fold costs the same at the 10th and at the
10,000th turn: it reads the batch and at most a summary's worth of facts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ctxwindow.compress import prompt
from ctxwindow.compress.base import Compressor, total_tokens
from ctxwindow.compress.calendar import Calendar
from ctxwindow.compress.llm import LLMSummarizer, merged_entry
from ctxwindow.compress.selection import (
    Candidate,
    Fact,
    candidates,
    facts_of,
    order,
    render,
    select,
)
from ctxwindow.compress.turns import Turn, TurnReader, summary_turns
from ctxwindow.errors import CompressionError
from ctxwindow.messages import Entry, Message
from ctxwindow.tokens.chat import ChatTokenizer

PRECUT = 4  # a batch above PRECUT x the budget is first cut by the summarizer
_TOKEN_CACHE = 16_384


class RollingSummary:
    """Fold evicted units into one pinned summary entry: old summary + evicted → new summary.

    The new entry has kind ``"summary"``, ``pinned=True``, the old summary's
    id (or a new one derived from what it summarizes), the place (``seq``) of
    the earliest source, ``metadata["summarized_ids"]`` (every original entry
    id folded in so far, whether or not a fact of it is still in the text),
    ``metadata["rolling"]`` (the facts and dates the next fold starts from;
    opaque) and ``metadata["compressed"]["by"]``: ``rolling(extractive)``, or
    ``rolling(llm)`` when an ``LLMSummarizer``'s summary is used. It never
    counts more than ``budget_tokens``, and the same input gives the same bytes.

    ``summarizer`` is an ``LLMSummarizer`` (its summary is used once it is
    ready; the extractive fold meanwhile), or any other compressor: the
    extractive fold is used, and a batch above four budgets is first cut by
    that compressor. ``tokenizer`` defaults to the summarizer's;
    ``piece_tokens`` is the longest piece a sentence is cut into.
    """

    def __init__(
        self,
        summarizer: Compressor,
        tokenizer: ChatTokenizer | None = None,
        *,
        piece_tokens: int = 48,
    ) -> None:
        found = tokenizer or getattr(summarizer, "tokenizer", None)
        if not isinstance(found, ChatTokenizer):
            raise CompressionError("RollingSummary needs a tokenizer (the summarizer has none)")
        self.summarizer = summarizer
        self.tokenizer = found
        self.reader = TurnReader(self._tokens, piece_tokens)
        self._counted: dict[str, int] = {}
        self._empty: int | None = None

    def fold(self, summary: Entry | None, evicted: Sequence[Entry], budget_tokens: int) -> Entry:
        """The summary of ``summary`` and ``evicted`` within ``budget_tokens`` (never blocks)."""
        sources = _sources(summary, evicted)
        if summary is not None and not evicted and summary.tokens <= budget_tokens:
            return summary
        if isinstance(self.summarizer, LLMSummarizer):
            result = self.summarizer(sources, budget_tokens)
            if _by_model(result, sources):
                return self._model(summary, evicted, result, budget_tokens)
        return self._extract(summary, evicted, budget_tokens)

    async def afold(
        self, summary: Entry | None, evicted: Sequence[Entry], budget_tokens: int
    ) -> Entry:
        """Like ``fold``, but awaits an ``LLMSummarizer``'s summary instead of its fallback."""
        sources = _sources(summary, evicted)
        if summary is not None and not evicted and summary.tokens <= budget_tokens:
            return summary
        if isinstance(self.summarizer, LLMSummarizer):
            result = await self.summarizer.summarize(sources, budget_tokens)
            if _by_model(result, sources):
                return self._model(summary, evicted, result, budget_tokens)
        return self._extract(summary, evicted, budget_tokens)

    # -- the extractive fold -------------------------------------------------------

    def _extract(self, summary: Entry | None, evicted: Sequence[Entry], budget: int) -> Entry:
        room = budget - self._empty_tokens()
        if room < 0:
            raise CompressionError(
                f"a summary budget of {budget} tokens is below an empty summary message"
            )
        state = summary.metadata.get("rolling") if summary is not None else None
        calendar = Calendar.from_state(state)
        turns = self._turns(self._precut(evicted, budget))
        calendar.add((turn.seq, turn.date) for turn in turns if turn.line == 0)
        facts = [*self._old_facts(summary, state), *facts_of(turns)]
        facts = [_dated(f, calendar) for f in facts]
        kept = select(candidates(facts, self._tokens), room)
        message, tokens, kept = self._fit(kept, budget)
        rows = [c.fact.row() for c in sorted(kept, key=order)]
        state = dict(calendar.state(), facts=rows)
        return self._entry(summary, evicted, (message, tokens), "extractive", state)

    def _precut(self, evicted: Sequence[Entry], budget: int) -> Sequence[Entry]:
        """A huge batch first goes through the summarizer, so a fold's cost stays bounded."""
        if isinstance(self.summarizer, LLMSummarizer) or total_tokens(evicted) <= PRECUT * budget:
            return evicted
        return self.summarizer(evicted, PRECUT * budget)

    def _turns(self, entries: Sequence[Entry]) -> list[Turn]:
        """The turns of ``entries`` in conversation order (a summary among them: its lines)."""
        names = {
            str(call.get("id")): str(call["function"].get("name"))
            for entry in entries
            for call in entry.message.get("tool_calls") or ()
            if isinstance(call, dict) and isinstance(call.get("function"), dict)
        }
        turns: list[Turn] = []
        for entry in sorted(entries, key=lambda e: e.seq):
            if entry.kind == "summary":
                turns.extend(summary_turns(entry, self.reader))
            else:
                turns.append(self.reader.read(entry, names))
        return turns

    def _old_facts(self, summary: Entry | None, state: Any) -> list[Fact]:
        """The facts of the old summary: from its state, else read from its text."""
        if summary is None:
            return []
        rows = state.get("facts") if isinstance(state, dict) else None
        if isinstance(rows, list):
            try:
                return [Fact.of(row) for row in rows]
            except ValueError:
                pass  # not our state: read the text
        return facts_of(summary_turns(dataclasses.replace(summary, seq=-1), self.reader))

    def _fit(self, kept: list[Candidate], budget: int) -> tuple[Message, int, list[Candidate]]:
        """The summary message of ``kept`` within ``budget`` and its tokens.

        Counted whole, the text can come out a little above the sum of its
        parts: then the last chosen pieces go until it fits.
        """
        kept = list(kept)
        while True:
            body, counts = render(sorted(kept, key=order))
            message = prompt.summary_message(prompt.heading_of(*counts), body)
            tokens = self.tokenizer.message_tokens(message)
            over = tokens - budget
            if over <= 0:
                return message, tokens, kept
            while over > 0 and kept:
                over -= kept.pop().tokens + 1

    def _empty_tokens(self) -> int:
        """Tokens of a summary message with no text, whatever its heading's language."""
        if self._empty is None:
            self._empty = max(
                self.tokenizer.message_tokens(prompt.summary_message(heading, ""))
                for heading in prompt.HEADINGS.values()
            )
        return self._empty

    def _tokens(self, text: str) -> int:
        counted = self._counted.get(text)
        if counted is None:
            if len(self._counted) >= _TOKEN_CACHE:
                self._counted.clear()
            counted = self._counted[text] = self.tokenizer.text(text)
        return counted

    # -- the model's summary and the new entry -------------------------------------

    def _model(
        self, summary: Entry | None, evicted: Sequence[Entry], result: list[Entry], budget: int
    ) -> Entry:
        text = "\n".join(prompt.strip_heading(prompt.content_text(e.message.get("content")))
                         for e in result)  # fmt: skip
        message = prompt.summary_message(prompt.heading_for(text), text)
        if self.tokenizer.message_tokens(message) > budget:
            return self._extract(summary, evicted, budget)
        state = summary.metadata.get("rolling") if summary is not None else None
        calendar = Calendar.from_state(state)
        calendar.add((turn.seq, turn.date) for turn in self._turns(evicted) if turn.line == 0)
        tokens = self.tokenizer.message_tokens(message)
        return self._entry(summary, evicted, (message, tokens), "llm", calendar.state())

    def _entry(
        self,
        summary: Entry | None,
        evicted: Sequence[Entry],
        counted: tuple[Message, int],
        by: str,
        state: dict[str, Any],
    ) -> Entry:
        """The new summary entry: ``counted`` is its message and the message's tokens."""
        sources = _sources(summary, evicted)
        message, tokens = counted
        label = f"rolling({by})"
        if summary is None:
            entry = merged_entry(sources, message, self.tokenizer, label, tokens=tokens)
            metadata = dict(entry.metadata, rolling=state)
            return dataclasses.replace(entry, pinned=True, metadata=metadata)
        # The summary keeps its id: no digest of every id folded so far (it grows).
        entry = merged_entry(
            sources, message, self.tokenizer, label, entry_id=summary.id, tokens=tokens
        )
        metadata = dict(summary.metadata, **entry.metadata, rolling=state)
        return dataclasses.replace(entry, pinned=True, metadata=metadata)


def _dated(fact: Fact, calendar: Calendar) -> Fact:
    """``fact`` with the date the calendar has learnt for its turn, if it had none."""
    if fact.date is not None:
        return fact
    date = calendar.date(fact.seq)
    return fact if date is None else dataclasses.replace(fact, date=date)


def _sources(summary: Entry | None, evicted: Sequence[Entry]) -> list[Entry]:
    sources = ([summary] if summary is not None else []) + list(evicted)
    if not sources:
        raise CompressionError("nothing to fold: no summary and no evicted entries")
    return sources


def _by_model(result: list[Entry], sources: list[Entry]) -> bool:
    """Whether ``result`` is the model's summary (not its fallback's, not the sources)."""
    return any(
        all(entry is not s for s in sources)
        and isinstance(entry.metadata.get("compressed"), dict)
        and entry.metadata["compressed"].get("by") == LLMSummarizer.name
        for entry in result
    )
