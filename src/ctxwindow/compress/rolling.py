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

What the summary draws on: a fold records the ids of the messages its text
still carries something of (``metadata["draws_on"]``), so a report calls a
message ``summarized`` only while the model can see a trace of it. The
extractive fold knows: the messages its kept facts come from. A model's
summary cannot say, so it is read by the marks rule (``credit``): a message
is drawn on when the text holds one of its traces — an identifier, a number
written with digits or a name — or, having none found, two of its other
words (CJK: character bigrams); each mark counts for one message only, the
first that was credited with it, so ``Caroline`` in a summary stands for one
message, not for every one that names her. A later fold keeps a credit while
its mark is still in the text (``PriorityWindow`` reads the summary of a
summarizer that records nothing by the same rule). Both cost what the fold
reads: the batch and a summary's worth of facts or marks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from ctxwindow.compress import prompt
from ctxwindow.compress.base import Compressor, total_tokens
from ctxwindow.compress.calendar import Calendar
from ctxwindow.compress.facts import marks, mentions
from ctxwindow.compress.llm import (
    UNUSED,
    LLMSummarizer,
    fallback_note,
    merged_entry,
    noted,
)
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
EARLIER = "the model's summary asked for by the fold before was not used: {why}"
DRAWS_ON = "draws_on"  # metadata: the ids of the messages the text still carries something of
CREDITS = "draws_on_marks"  # metadata: [mark, id] pairs, a text read by the marks rule
_TOKEN_CACHE = 16_384


class RollingSummary:
    """Fold evicted units into one pinned summary entry: old summary + evicted → new summary.

    The new entry has kind ``"summary"``, ``pinned=True``, the old summary's
    id (or a new one derived from what it summarizes), the place (``seq``) of
    the earliest source, ``metadata["summarized_ids"]`` (every original entry
    id folded in so far, whether or not a fact of it is still in the text),
    ``metadata["draws_on"]`` (the ids of those the text still carries
    something of: see the module's docstring; ``"draws_on_marks"``, how a
    model's text was credited),
    ``metadata["rolling"]`` (the facts and dates the next fold starts from;
    opaque) and ``metadata["compressed"]["by"]``: ``rolling(extractive)``, or
    ``rolling(llm)`` when an ``LLMSummarizer``'s summary is used. When the
    model's summary failed — the one this fold asked for, or with ``fold`` the
    one the fold before started in the background — ``metadata["compressed"]
    ["fallback"]`` says why the extractive fold stands in: a failed summary
    never replaces the old one. It never counts more than ``budget_tokens``,
    and the same input gives the same bytes.

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
        # the last ``fold``'s summary, batch and budget (what it asked the model about)
        # and the summary it returned
        self._asked: tuple[Entry | None, Sequence[Entry], int, Entry] | None = None

    def fold(self, summary: Entry | None, evicted: Sequence[Entry], budget_tokens: int) -> Entry:
        """The summary of ``summary`` and ``evicted`` within ``budget_tokens`` (never blocks)."""
        if summary is not None and not evicted and summary.tokens <= budget_tokens:
            return summary
        if isinstance(self.summarizer, LLMSummarizer):
            # The summary asked for by the last fold came (or not) in the background: if it
            # came, it stands for what that fold folded, and this fold builds on it.
            earlier, self._asked = self._asked, None
            summary, why = self._adopted(self.summarizer, summary, earlier)
            result = self.summarizer(_sources(summary, evicted), budget_tokens)
            note = None if why is None else EARLIER.format(why=why)
            folded = self._either(summary, evicted, result, budget_tokens, note)
            self._asked = (summary, evicted, budget_tokens, folded)
            return folded
        return self._extract(summary, evicted, budget_tokens)

    def _adopted(
        self,
        summarizer: LLMSummarizer,
        summary: Entry | None,
        earlier: tuple[Entry | None, Sequence[Entry], int, Entry] | None,
    ) -> tuple[Entry | None, str | None]:
        """``summary``, or, when it is what the last fold returned, the model's summary of
        what that fold folded if it has come since; and why it was not used, if it failed."""
        if earlier is None:
            return summary, None
        old, batch, budget, returned = earlier
        if summary is None or summary.message != returned.message:
            return summary, None  # not a fold on the last one's summary
        sources = _sources(old, batch)
        ready = summarizer.ready(sources, budget)
        if ready is not None and _by_model(ready, sources):
            adopted = self._model(old, batch, ready, budget)
            if adopted.metadata["compressed"].get("by") == f"rolling({LLMSummarizer.name})":
                return adopted, None
        return summary, summarizer.failure(sources, budget)

    async def afold(
        self, summary: Entry | None, evicted: Sequence[Entry], budget_tokens: int
    ) -> Entry:
        """Like ``fold``, but awaits an ``LLMSummarizer``'s summary instead of its fallback."""
        sources = _sources(summary, evicted)
        if summary is not None and not evicted and summary.tokens <= budget_tokens:
            return summary
        if isinstance(self.summarizer, LLMSummarizer):
            result = await self.summarizer.summarize(sources, budget_tokens)
            return self._either(summary, evicted, result, budget_tokens)
        return self._extract(summary, evicted, budget_tokens)

    def _either(
        self,
        summary: Entry | None,
        evicted: Sequence[Entry],
        result: list[Entry],
        budget: int,
        earlier: str | None = None,
    ) -> Entry:
        """The model's summary if ``result`` (an ``LLMSummarizer``'s) is it, else the
        extractive fold, saying why the model's was not used when that is known (this
        request's failure, else ``earlier``: the last fold's)."""
        if _by_model(result, _sources(summary, evicted)):
            return self._model(summary, evicted, result, budget)
        folded = self._extract(summary, evicted, budget)
        note = fallback_note(result) or earlier
        return folded if note is None else noted(folded, note)

    # -- the extractive fold -------------------------------------------------------

    def _extract(self, summary: Entry | None, evicted: Sequence[Entry], budget: int) -> Entry:
        room = budget - self._empty_tokens()
        if room < 0:
            raise CompressionError(
                f"a summary budget of {budget} tokens is below an empty summary message"
            )
        state = summary.metadata.get("rolling") if summary is not None else None
        calendar = Calendar.from_state(state)
        batch = self._precut(evicted, budget)
        turns = self._turns(batch)
        calendar.add((turn.seq, turn.date) for turn in turns if turn.line == 0)
        facts = [*self._old_facts(summary, state), *facts_of(turns)]
        facts = [_dated(f, calendar) for f in facts]
        kept = select(candidates(facts, self._tokens), room)
        message, tokens, kept = self._fit(kept, budget)
        kept = sorted(kept, key=order)
        drawn = _drawn(kept, _seq_ids(state, batch))
        ids = [[seq, source_id] for seq, source_id in drawn.items()]
        state = dict(calendar.state(), facts=[c.fact.row() for c in kept], ids=ids)
        credits = credit(prompt.content_text(message["content"]), _credits(summary), ())
        draws = _draws_on([*drawn.values(), *credited_ids(credits)], credits)
        return self._entry(summary, evicted, (message, tokens), "extractive", state, draws)

    def _precut(self, evicted: Sequence[Entry], budget: int) -> Sequence[Entry]:
        """A huge batch first goes through the summarizer, each text cut to its share of
        ``PRECUT`` times the budget, so that long texts cost the fold no more than that.
        A batch of many short turns, whose shares hold no sentence, is read whole: a step
        of 1,400 short turns at 96,000 tokens folds them in ~0.25 s."""
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
            why = UNUSED.format(why=f"over {budget:,} tokens under its heading")
            return noted(self._extract(summary, evicted, budget), why)
        state = summary.metadata.get("rolling") if summary is not None else None
        calendar = Calendar.from_state(state)
        turns = self._turns(evicted)
        calendar.add((turn.seq, turn.date) for turn in turns if turn.line == 0)
        tokens = self.tokenizer.message_tokens(message)
        # The model cannot say what it kept: what the old text drew on and the batch are
        # read for their marks, the oldest first (the first credited with a mark keeps it).
        said = [*_old_sources(state), *_sources_of(turns, _seq_ids(None, evicted))]
        credits = credit(text, _credits(summary), said)
        draws = _draws_on(credited_ids(credits), credits)
        return self._entry(summary, evicted, (message, tokens), "llm", calendar.state(), draws)

    def _entry(
        self,
        summary: Entry | None,
        evicted: Sequence[Entry],
        counted: tuple[Message, int],
        by: str,
        state: dict[str, Any],
        draws: dict[str, Any],
    ) -> Entry:
        """The new summary entry: ``counted`` is its message and the message's tokens,
        ``draws`` what its text draws on (``DRAWS_ON``, ``CREDITS``)."""
        sources = _sources(summary, evicted)
        message, tokens = counted
        label = f"rolling({by})"
        if summary is None:
            entry = merged_entry(sources, message, self.tokenizer, label, tokens=tokens)
            metadata = dict(entry.metadata, rolling=state, **draws)
            return dataclasses.replace(entry, pinned=True, metadata=metadata)
        # The summary keeps its id: no digest of every id folded so far (it grows).
        entry = merged_entry(
            sources, message, self.tokenizer, label, entry_id=summary.id, tokens=tokens
        )
        metadata = dict(summary.metadata, **entry.metadata, rolling=state, **draws)
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


# -- what the summary draws on ---------------------------------------------------------


def credit(text: str, before: Any, sources: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The marks rule: which messages ``text`` (a summary) draws on, as ``[mark, id]`` pairs.

    ``before``: the credits of the summary it replaces, kept while ``text`` still holds
    their mark. ``sources``: ``(id, what it said)``, oldest first; each is credited
    with its traces (``ctxwindow.compress.facts.marks``) that ``text`` holds and no one
    has yet, else with two of its other words, else with nothing.
    """
    pairs = _pairs(before)
    said = list(sources)
    if not pairs and not said:
        return []
    folded = text.casefold()
    credits = [pair for pair in pairs if mentions(folded, pair[0])]
    taken = {mark for mark, _ in credits}
    for source_id, what in said:
        traces, others = marks(what)
        found = [m for m in traces if m not in taken and mentions(folded, m)]
        if not found:
            found = [m for m in others if m not in taken and mentions(folded, m)][:2]
            if len(found) < 2:
                continue  # one common word is no trace of a message
        taken.update(found)
        credits.extend([mark, source_id] for mark in found)
    return credits


def credited_ids(credits: Sequence[Sequence[str]]) -> list[str]:
    """The ids ``credit`` found, each once, in the order they were credited."""
    return list(dict.fromkeys(source_id for _, source_id in credits))


def _pairs(value: Any) -> list[list[str]]:
    """The ``[mark, id]`` pairs of a summary's metadata (none when it holds something else)."""
    if not isinstance(value, list):
        return []
    return [
        [str(pair[0]), str(pair[1])]
        for pair in value
        if isinstance(pair, (list, tuple)) and len(pair) == 2
    ]


def _credits(summary: Entry | None) -> Any:
    return summary.metadata.get(CREDITS) if summary is not None else None


def _draws_on(ids: Iterable[str], credits: list[list[str]]) -> dict[str, Any]:
    return {DRAWS_ON: list(dict.fromkeys(ids)), CREDITS: credits}


def _seq_ids(state: Any, entries: Sequence[Entry]) -> dict[int, str]:
    """Which message a fact's seq is: one the old summary drew on (its state's ``ids``)
    or one of ``entries`` (not a summary among them: its facts are no one message's)."""
    ids: dict[int, str] = {}
    rows = state.get("ids") if isinstance(state, dict) else None
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, (list, tuple)) and len(row) == 2 and isinstance(row[0], int):
            ids[row[0]] = str(row[1])
    ids.update((entry.seq, entry.id) for entry in entries if entry.kind != "summary")
    return ids


def _drawn(kept: Sequence[Candidate], ids: dict[int, str]) -> dict[int, str]:
    """The messages the kept facts come from, by seq, in conversation order."""
    return {c.fact.seq: ids[c.fact.seq] for c in kept if c.fact.seq in ids}


def _old_sources(state: Any) -> list[tuple[str, str]]:
    """What the messages an extractive summary drew on said in it (its kept facts)."""
    if not isinstance(state, dict) or not isinstance(state.get("facts"), list):
        return []
    try:
        facts = [Fact.of(row) for row in state["facts"]]
    except ValueError:
        return []
    return _said(((f.seq, f.text) for f in facts), _seq_ids(state, ()))


def _sources_of(turns: Sequence[Turn], ids: dict[int, str]) -> list[tuple[str, str]]:
    """What each message of ``turns`` said: its pieces."""
    return _said(((t.seq, p.text) for t in turns for p in t.pieces), ids)


def _said(pieces: Iterable[tuple[int, str]], ids: dict[int, str]) -> list[tuple[str, str]]:
    """``(id, text)`` per message of ``pieces`` (``(seq, text)``), in seq order."""
    texts: dict[int, list[str]] = {}
    for seq, text in pieces:
        if seq in ids:
            texts.setdefault(seq, []).append(text)
    return [(ids[seq], " ".join(texts[seq])) for seq in sorted(texts)]
