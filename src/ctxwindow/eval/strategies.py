"""Context strategies for the evaluation: what a strategy is, and their registry.

A strategy builds the context it would send to the model when a question is
asked. ``start`` makes an empty state for a budget and ``ingest`` adds one
history message to it (not timed); ``build`` returns the context for a
question without changing the state (timed: that is ``build_ms``), so a
conversation is ingested once per budget and every question asked at the
same point shares it. ``prepare`` ingests one case's history from scratch:
the reference the tests compare the shared path with. A strategy whose
``budgeted`` is False (``full``) is run once, under the budget label
``"unbounded"``.

Register your own with ``register_strategy("mine", Mine)``; names are unique
and an unknown name lists the known ones. The built-in strategies live in
``window_strategies`` (a window alone) and ``recall_strategies`` (searching
past turns), each imported when first asked for.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctxwindow.eval.dataset import Conversation, Question
from ctxwindow.messages import Entry, Message
from ctxwindow.policies.explain import Decision
from ctxwindow.policies.rules import text_of
from ctxwindow.tokens.chat import ChatTokenizer


@dataclass(frozen=True)
class Case:
    """One question asked at one point of one conversation."""

    conversation: Conversation
    question: Question

    @property
    def history(self) -> list[tuple[str, Message]]:
        return self.conversation.history(self.question)

    @property
    def prompt(self) -> Message:
        return {"role": "user", "content": self.question.question}


@dataclass(frozen=True)
class Built:
    """A built context: the messages to send and the dataset ids of those kept.

    ``kept_ids`` are the messages sent whole. ``compressed_ids`` are those sent
    only in a compressed form or folded into a summary, and ``compressed_text``
    gives, for each of them, the text of that form in ``messages`` (for a
    summarized one, the summary's text). A compressed evidence message counts
    only when the question's answer is in its own text there (``runner``);
    one without an entry in ``compressed_text`` is present but never credited.
    A strategy that sends messages only whole fills ``kept_ids`` alone.
    """

    messages: list[Message]
    kept_ids: frozenset[str]
    compressed_ids: frozenset[str] = frozenset()
    compressed_text: Mapping[str, str] = field(default_factory=dict, hash=False)


def compressed_texts(
    messages: Sequence[Message], rows: Iterable[Decision], dataset_ids: Mapping[str, str]
) -> dict[str, str]:
    """For a context a ctxwindow window built (``messages``, its report's ``rows``): the
    dataset id of each compressed or summarized message -> the text of its form in
    ``messages``. ``dataset_ids`` maps entry ids to dataset ids.

    A row names no message, but its preview is of the message as sent: a
    compressed row's text is the message that its preview is the preview of, a
    summarized row's the rolling summary's (the row without a seq). Several
    messages with the same preview are told apart by their order.
    """
    rows = list(rows)
    texts = [text_of(message) for message in messages]
    previews = [_preview(text) for text in texts]
    summary = next((row for row in rows if row.seq is None and row.in_context), None)
    summary_text = None if summary is None else _sent_text(summary, rows, texts, previews)
    found: dict[str, str] = {}
    for row in rows:
        mid = dataset_ids.get(row.id)
        if mid is None or row.state not in ("compressed", "summarized"):
            continue
        text = _sent_text(row, rows, texts, previews) if row.state == "compressed" else summary_text
        if text is not None:
            found[mid] = text
    return found


def _preview(text: str) -> str:
    """The preview a report row gives of a message of this text (``Decision.of``'s)."""
    return Decision.of(Entry({"role": "user", "content": text}, 0, 0), "kept").preview


def _sent_text(
    row: Decision, rows: Sequence[Decision], texts: Sequence[str], previews: Sequence[str]
) -> str | None:
    """The text of the message ``row`` stands for, or None when none has its preview.

    A message that joins several (the system prompt and the summary, for a model
    that takes one system message) contains the row's preview rather than starting
    with it.
    """
    same = [i for i, preview in enumerate(previews) if preview == row.preview]
    if not same:
        inner = " ".join(row.preview.removesuffix("…").split())
        same = [i for i, text in enumerate(texts) if inner and inner in " ".join(text.split())]
    if not same:
        return None
    if len({texts[i] for i in same}) == 1:
        return texts[same[0]]
    # The k-th row of this preview is taken to be the k-th message of it: rows come
    # by seq, messages as sent, the same order but for recalled turns (which the
    # cache mode sends after the window), so a recalled twin is left out of the count.
    twins = [r for r in rows if r.in_context and r.state != "recalled" and r.preview == row.preview]
    rank = next(k for k, twin in enumerate(twins) if twin is row)
    return texts[same[min(rank, len(same) - 1)]]


class Strategy(ABC):
    """Base class of evaluation strategies (see the module docstring)."""

    name: ClassVar[str]
    budgeted: ClassVar[bool] = True
    # The extra it needs beyond ``eval`` (``ctxwindow eval`` checks it before any work).
    extra: ClassVar[str | None] = None
    baseline: ClassVar[bool] = False  # a simple baseline: the report and bench_recall take the best

    def calibrate(
        self, cases: Sequence[Case], budget: int, tokenizer: ChatTokenizer
    ) -> dict[str, Any]:
        """Prepare for one budget over all cases; returns facts for the report."""
        return {}

    @abstractmethod
    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        """A new state, with no history yet, for this budget (None: unbounded)."""

    @abstractmethod
    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        """Add one history message to the state (not timed)."""

    @abstractmethod
    def build(self, state: Any, case: Case) -> Built:
        """The context for the case's question; must not change the state (timed)."""

    def respond(self, state: Any, message_id: str, message: Message) -> list[Message]:
        """Take a user turn as an app would: add it, and return the context sent for it
        (``ctxwindow eval --replay``). It may change the state, as sending does. Every
        built-in strategy has it; one of your own without it cannot be replayed
        (``replays`` says so before any work)."""
        raise NotImplementedError(f"the strategy {self.name!r} cannot replay turns")

    @property
    def replays(self) -> bool:
        """Whether this strategy implements ``respond``."""
        return type(self).respond is not Strategy.respond

    def prepare(self, case: Case, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        """A state that has ingested the case's history, from scratch."""
        state = self.start(budget, tokenizer)
        for message_id, message in case.history:
            self.ingest(state, message_id, message)
        return state


# -- the registry -----------------------------------------------------------------

_REGISTRY: dict[str, Callable[[], Strategy]] = {}


def register_strategy(name: str, factory: Callable[[], Strategy]) -> None:
    """Register a zero-argument constructor under ``name``; names are unique."""
    if name in _REGISTRY:
        raise ValueError(f"a strategy named {name!r} is already registered")
    _REGISTRY[name] = factory


def unregister_strategy(name: str) -> None:
    """Remove a registered strategy (for plug-ins that are unloaded, and tests)."""
    _REGISTRY.pop(name, None)


def get_strategy(name: str) -> Strategy:
    """A new instance of the named strategy."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        known = ", ".join(strategy_names())
        raise ValueError(f"unknown strategy {name!r}; known strategies: {known}") from None
    return factory()


def strategy_names() -> list[str]:
    return sorted(_REGISTRY)


DEFAULT_STRATEGIES = ("message_window", "token_window", "hybrid", "full")

# The built-in strategies by name, as ``module:class``: imported when first asked for.
_BUILTIN = {
    "message_window": "ctxwindow.eval.window_strategies:MessageWindowStrategy",
    "token_window": "ctxwindow.eval.window_strategies:TokenWindowStrategy",
    "hybrid": "ctxwindow.eval.recall_strategies:HybridStrategy",
    "hybrid_words": "ctxwindow.eval.recall_strategies:HybridWords",
    "hybrid_minilm": "ctxwindow.eval.recall_strategies:HybridMiniLM",
    "hybrid_nocache": "ctxwindow.eval.recall_strategies:HybridNoCache",
    "hybrid_norecall": "ctxwindow.eval.window_strategies:HybridNoRecall",
    "hybrid_nosummary": "ctxwindow.eval.window_strategies:HybridNoSummary",
    "full": "ctxwindow.eval.window_strategies:FullHistory",
    "bm25": "ctxwindow.eval.recall_strategies:Retrieval",
    "bm25_fill": "ctxwindow.eval.baselines:BM25Fill",
    "dense_fill": "ctxwindow.eval.baselines:DenseFill",
    "rrf_fill": "ctxwindow.eval.baselines:RRFFill",
    "bm25_fill_nb": "ctxwindow.eval.baselines:BM25FillNeighbours",
    "dense_fill_nb": "ctxwindow.eval.baselines:DenseFillNeighbours",
    "rrf_fill_nb": "ctxwindow.eval.baselines:RRFFillNeighbours",
    "recent_rrf": "ctxwindow.eval.baselines:RecentRRF",
}


def _builtin(path: str) -> Callable[[], Strategy]:
    """A zero-argument constructor of the strategy class at ``module:class``."""
    module, _, name = path.partition(":")

    def construct() -> Strategy:
        strategy: Callable[[], Strategy] = getattr(importlib.import_module(module), name)
        return strategy()

    return construct


for _name, _path in _BUILTIN.items():
    register_strategy(_name, _builtin(_path))
