"""The strongest simple baselines: what a user writes in twenty lines, as eval strategies.

Each ranks every past message against the question and fills the budget with
the best, the bar the hybrid has to clear:

- ``bm25_fill``: bm25s's Lucene BM25 (k1 1.5, b 0.75, English stop words,
  Snowball stemming by PyStemmer), the question as the query;
- ``dense_fill``: the cosine of the embedder's vectors (``default_embedder``
  of ``ctxwindow.archive.embedders`` when it has one, else all-MiniLM-L6-v2);
- ``rrf_fill``: both rankings fused by reciprocal rank fusion, k = 60, equal
  weights (a message scores the sum of 1 / (60 + rank) over the rankings it
  is in, ranks from 1);
- ``bm25_fill_nb``, ``dense_fill_nb``, ``rrf_fill_nb``: the same rankings, each
  hit sent with its neighbours (below);
- ``recent_rrf``: the newest turns take half the budget, ``rrf_fill`` the
  older rest.

What they share, precisely:

- The room is the budget less the question alone in a request (its framing
  and the reply priming). Ranked best first, each message is taken with its
  tool unit (an assistant message calling tools and the tool results after
  it) if that fits what is left of the room; one that does not fit is passed
  over for smaller ones after it. What is taken is sent in its original
  order, then the question; messages are only ever whole.
- BM25 ranks the messages that share a term with the question (a score above
  0): one that shares none is never sent by ``bm25_fill``. The dense ranking
  and RRF rank every message. Equal scores: the earlier message first.
- Neighbours (``*_nb``): a hit's block is its unit, the unit of the message
  just before it and the unit of the message just after it, taken together
  when they fit. A message already taken is neither sent nor counted twice: a
  block costs the tokens of its messages not yet taken, so a hit that came in
  as an earlier hit's neighbour still brings its own neighbours, and a block
  adding nothing is skipped. When the block does not fit, the hit is taken
  alone (its unit) if that fits, as ``*_fill`` would take it; its neighbours
  are then left out, though a later hit may bring them.
- ``recent_rrf``: walking back from the last message, the newest units are
  taken while they fit in half the room (the first that does not ends them:
  a window, no gaps); RRF over the messages before them (ranks among those
  alone) fills the rest of the room.

Text and languages: a message is found by its text and the tool calls it
makes (``ctxwindow.archive.text.entry_text``). For BM25 the text first goes
through ctxwindow's own segmentation (``index_text``: NFKC, accents off
Latin letters, emoji as tokens, each run of Chinese, Japanese or Korean cut
into bigrams), then through bm25s's tokenizer unchanged; ASCII text is left
as it is, so English ranks exactly as bm25s alone ranks it, and a Chinese
question matches its turns on their shared bigrams where bm25s alone sees
each run as one word (single CJK characters drop out, as one-letter words
do). The index is kept incrementally (postings added as messages are
ingested, scores computed at the question with bm25s's formula, checked
against bm25s in the tests), so a build reads it and changes nothing. MiniLM
was trained on English: ``dense_fill`` on Chinese is weak, as it would be
for a user.

Speed: each distinct text is embedded once per process, in a cache shared by
every budget and dense strategy. ``calibrate`` (run in the parent before the
workers fork) only notes which texts come together, one conversation's turns
and questions, loading no model; the first of them a process needs embeds
the whole batch at once, at ingest (untimed), so ``build_ms`` of a dense
strategy leaves out embedding its question, when ``calibrate`` saw it.
Stemming is cached by text too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

# bm25.py and embeddings.py were split from here; their names are still imported from here
from ctxwindow.eval.bm25 import K1 as K1
from ctxwindow.eval.bm25 import B as B
from ctxwindow.eval.bm25 import Lexical as Lexical
from ctxwindow.eval.bm25 import load_bm25s
from ctxwindow.eval.bm25 import terms as terms
from ctxwindow.eval.embeddings import Dense, embeddings_of
from ctxwindow.eval.embeddings import Embeddings as Embeddings
from ctxwindow.eval.embeddings import default_embedder as default_embedder
from ctxwindow.eval.strategies import Built, Case, Strategy
from ctxwindow.messages import Entry, Message
from ctxwindow.tokens.chat import ChatTokenizer

if TYPE_CHECKING:
    from ctxwindow.archive.embedders import Embedder

RRF_K = 60


# -- what a baseline has ingested, and tool units -----------------------------------


def unit_start(units: Sequence[int], message: Message) -> int:
    """Where the unit of a new message starts (``units``: the start of each message's unit
    so far): a tool result belongs to its call's unit, anything else starts one."""
    return units[-1] if message["role"] == "tool" and units else len(units)


def unit_of(units: Sequence[int], index: int) -> range:
    """The indexes of the messages in the unit of message ``index``."""
    start = units[index]
    end = index + 1
    while end < len(units) and units[end] == start:
        end += 1
    return range(start, end)


def block_of(units: Sequence[int], index: int) -> list[int]:
    """A hit with its neighbours: its unit and the units just before and after it."""
    unit = unit_of(units, index)
    before = unit_of(units, unit.start - 1) if unit.start > 0 else range(0)
    after = unit_of(units, unit.stop) if unit.stop < len(units) else range(0)
    return [*before, *unit, *after]


def fill(
    ranking: Iterable[int],
    units: Sequence[int],
    tokens: Sequence[int],
    room: int,
    chosen: set[int],
    used: int = 0,
    *,
    neighbours: bool = False,
) -> int:
    """Add to ``chosen``, best first, each ranked message's unit (with ``neighbours``, its
    block if that fits, else its unit) that fits ``room`` with the ``used`` tokens;
    returns the tokens used.

    Messages already chosen are not counted again; what does not fit is passed
    over whole.
    """
    for index in ranking:
        unit = unit_of(units, index)
        for part in (block_of(units, index), unit) if neighbours else (unit,):
            new = [i for i in part if i not in chosen]
            size = sum(tokens[i] for i in new)
            if new and used + size <= room:
                chosen.update(new)
                used += size
                break
    return used


def newest(units: Sequence[int], tokens: Sequence[int], room: int) -> tuple[int, int]:
    """The newest whole units that fit ``room``, from the last message back to the first
    that does not fit: the index where they start, and their tokens."""
    start, used = len(units), 0
    while start > 0:
        first = units[start - 1]
        size = sum(tokens[first:start])
        if used + size > room:
            break
        start, used = first, used + size
    return start, used


def rrf(rankings: Iterable[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion, equal weights: by the sum of 1 / (k + rank), ranks from 1
    (a ranking an item is missing from adds nothing); equal sums, the smaller item first."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(fused, key=lambda item: (-fused[item], item))


def message_text(message: Message) -> str:
    """The text a message is found by: its text parts, and the tool calls it makes."""
    from ctxwindow.archive.text import entry_text

    return entry_text(Entry(message, 0, 0, id=""))


@dataclass
class History:
    """The messages a baseline has ingested: ids, messages, tokens, and tool units."""

    ids: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    units: list[int] = field(default_factory=list)  # index of the message starting each unit

    def add(self, message_id: str, message: Message, tokens: int) -> None:
        self.units.append(unit_start(self.units, message))
        self.ids.append(message_id)
        self.messages.append(message)
        self.tokens.append(tokens)


# -- the strategies ------------------------------------------------------------------------


@dataclass
class Ranked:
    """A baseline's state: the history and its indexes."""

    budget: int
    tokenizer: ChatTokenizer
    history: History = field(default_factory=History)
    lexical: Lexical | None = None
    dense: Dense | None = None


class _Baseline(Strategy):
    """Rank every past message against the question, fill the budget best first."""

    baseline: ClassVar[bool] = True
    lexical: ClassVar[bool] = False
    dense: ClassVar[bool] = False
    neighbours: ClassVar[bool] = False
    recent: ClassVar[bool] = False  # the newest turns take half the room

    def __init__(self, embedder: Embedder | None = None) -> None:
        """``embedder``: any object with ``dim`` and ``embed`` (default: the packaged one)."""
        self.embeddings = embeddings_of(embedder) if self.dense else None

    def calibrate(
        self, cases: Sequence[Case], budget: int, tokenizer: ChatTokenizer
    ) -> dict[str, Any]:
        if self.lexical:
            load_bm25s()  # a missing bm25s fails here, before any work
        if self.embeddings is not None:
            asked: dict[str, list[Case]] = {}
            for case in cases:
                asked.setdefault(case.conversation.id, []).append(case)
            for group in asked.values():
                conversation = group[0].conversation
                seen = max(conversation.seen(case.question) for case in group)
                questions = [case.question.question for case in group]
                messages = conversation.messages[:seen]
                texts = functools.partial(map, message_text, messages)
                self.embeddings.expect((conversation.id, seen, tuple(questions)), texts, questions)
        return {}

    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        assert budget is not None
        return Ranked(
            budget, tokenizer,
            lexical=Lexical() if self.lexical else None,
            dense=Dense() if self.dense else None,
        )  # fmt: skip

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        state.history.add(message_id, message, state.tokenizer.message_tokens(message))
        text = message_text(message)
        if state.lexical is not None:
            state.lexical.add(terms(text))
        if state.dense is not None:
            assert self.embeddings is not None
            state.dense.add(self.embeddings.vector(text))

    def build(self, state: Any, case: Case) -> Built:
        chosen = self.chosen(state, case.question.question, case.prompt)
        history: History = state.history
        messages = [history.messages[i] for i in chosen]
        return Built([*messages, case.prompt], frozenset(history.ids[i] for i in chosen))

    def respond(self, state: Any, message_id: str, message: Message) -> list[Message]:
        from ctxwindow.policies.rules import text_of

        chosen = self.chosen(state, text_of(message), message)
        self.ingest(state, message_id, message)
        return [*(state.history.messages[i] for i in chosen), message]

    def chosen(self, state: Ranked, query: str, prompt: Message) -> list[int]:
        """The indexes of the history messages sent with ``prompt``, in order."""
        history = state.history
        room = state.budget - state.tokenizer.count([prompt])
        chosen: set[int] = set()
        used, end = 0, len(history.ids)
        if self.recent:
            end, used = newest(history.units, history.tokens, room // 2)
            chosen.update(range(end, len(history.ids)))
        if end:
            ranking = self.ranking(state, query, end)
            fill(
                ranking,
                history.units,
                history.tokens,
                room,
                chosen,
                used,
                neighbours=self.neighbours,
            )
        return sorted(chosen)

    def ranking(self, state: Ranked, query: str, end: int) -> list[int]:
        """The first ``end`` messages ranked against ``query``, best first."""
        import numpy as np

        rankings: list[list[int]] = []
        if state.lexical is not None:
            scores = state.lexical.scores(terms(query))[:end]
            order = np.argsort(-scores, kind="stable")
            rankings.append(order[: np.count_nonzero(scores > 0)].tolist())
        if state.dense is not None:
            assert self.embeddings is not None
            scores = state.dense.scores(self.embeddings.vector(query, query=True))[:end]
            rankings.append(np.argsort(-scores, kind="stable").tolist())
        return rankings[0] if len(rankings) == 1 else rrf(rankings)


class BM25Fill(_Baseline):
    """BM25 fill: bm25s's Lucene BM25 (stemmed) ranks every past turn, the best that fit sent."""

    name = "bm25_fill"
    lexical = True


class DenseFill(_Baseline):
    """Dense fill: every past turn ranked by embedding cosine, the best that fit sent."""

    name = "dense_fill"
    dense = True
    extra = "dense"


class RRFFill(_Baseline):
    """RRF fill: BM25 and dense rankings fused (k = 60), the best turns that fit sent."""

    name = "rrf_fill"
    lexical = True
    dense = True
    extra = "dense"


class BM25FillNeighbours(BM25Fill):
    """BM25 fill with neighbours: each hit sent with the turns before and after it."""

    name = "bm25_fill_nb"
    neighbours = True


class DenseFillNeighbours(DenseFill):
    """Dense fill with neighbours: each hit sent with the turns before and after it."""

    name = "dense_fill_nb"
    neighbours = True


class RRFFillNeighbours(RRFFill):
    """RRF fill with neighbours: each hit sent with the turns before and after it."""

    name = "rrf_fill_nb"
    neighbours = True


class RecentRRF(RRFFill):
    """The newest turns in half the budget, RRF fill over the older rest."""

    name = "recent_rrf"
    recent = True
