"""Context strategies for the evaluation, and their registry.

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
and an unknown name lists the known ones.
"""

from __future__ import annotations

import bisect
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctxwindow.eval.dataset import Conversation, Question
from ctxwindow.messages import SYSTEM_ROLES, Message
from ctxwindow.policies import MessageWindow, TokenWindow, Window
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

    ``compressed_ids`` are messages kept only in compressed or summarized
    form: their evidence counts only if the answer survived in the context.
    """

    messages: list[Message]
    kept_ids: frozenset[str]
    compressed_ids: frozenset[str] = frozenset()


class Strategy(ABC):
    """Base class of evaluation strategies (see the module docstring)."""

    name: ClassVar[str]
    budgeted: ClassVar[bool] = True

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

    def prepare(self, case: Case, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        """A state that has ingested the case's history, from scratch."""
        state = self.start(budget, tokenizer)
        for message_id, message in case.history:
            self.ingest(state, message_id, message)
        return state


class FullHistory(Strategy):
    """Everything, no budget: the ceiling of recall and of cost."""

    name = "full"
    budgeted = False

    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        return []

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        state.append((message_id, message))

    def build(self, state: Any, case: Case) -> Built:
        history: list[tuple[str, Message]] = state
        messages = [message for _, message in history]
        messages.append(case.prompt)
        return Built(messages, frozenset(mid for mid, _ in history))


@dataclass
class _Ingested:
    """A window or manager that has ingested a history, and its entries' dataset ids."""

    holder: Any
    dataset_ids: dict[str, str] = field(default_factory=dict)  # entry id -> dataset message id


class _WindowStrategy(Strategy):
    """Ingest the history into a ctxwindow window; the question's context is its preview."""

    @abstractmethod
    def window(self, budget: int, tokenizer: ChatTokenizer) -> Window:
        """A new, empty window for this budget."""

    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        assert budget is not None
        return _Ingested(self.window(budget, tokenizer))

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        entry = state.holder.add(message, metadata={"id": message_id})
        if entry is not None:
            state.dataset_ids[entry.id] = message_id

    def build(self, state: Any, case: Case) -> Built:
        window: Window = state.holder
        context = window.preview(case.prompt)
        sent = {id(message) for message in context.messages}
        kept: set[str] = set()
        compressed: set[str] = set()
        for entry in window.entries():
            if id(entry.message) not in sent:
                continue
            mid = entry.metadata.get("id")
            if mid is not None and (
                "compressed" in entry.metadata or "truncated" in entry.metadata
            ):
                compressed.add(mid)
            elif mid is not None:
                kept.add(mid)
            summarized = entry.metadata.get("summarized_ids", ())
            compressed.update(state.dataset_ids[i] for i in summarized if i in state.dataset_ids)
        return Built(context.messages, frozenset(kept), frozenset(compressed) - kept)


class TokenWindowStrategy(_WindowStrategy):
    """``TokenWindow``: the newest whole messages that fit the token budget.

    A history message larger than the whole budget is dropped
    (``oversize="drop"``) rather than cut: a pure token window keeps a
    message whole or not at all.
    """

    name = "token_window"

    def window(self, budget: int, tokenizer: ChatTokenizer) -> Window:
        return TokenWindow(budget, model=tokenizer.model, tokenizer=tokenizer, oversize="drop")


class MessageWindowStrategy(_WindowStrategy):
    """``MessageWindow``: the last N messages, N chosen per budget.

    For each budget, N is the largest number of messages (the question
    included) whose mean context size over all cases stays within the budget.
    The mean is computed from each message's exact token count and ignores
    tool units (the window evicts them whole, which can keep a little less).
    Individual contexts can overshoot the budget: the report gives how often.
    """

    name = "message_window"

    def __init__(self) -> None:
        self._n: dict[int, int] = {}

    def calibrate(
        self, cases: Sequence[Case], budget: int, tokenizer: ChatTokenizer
    ) -> dict[str, Any]:
        sizes = [_SizeTable(case, tokenizer) for case in cases]
        longest = max(len(s.suffix) for s in sizes)
        means = [_mean(sizes, k) for k in range(1, longest + 2)]  # non-decreasing in k
        self._n[budget] = max(bisect.bisect_right(means, budget), 1)
        return {"messages": self._n[budget]}

    def window(self, budget: int, tokenizer: ChatTokenizer) -> Window:
        if budget not in self._n:
            raise RuntimeError("message_window: calibrate() must run before prepare()")
        n = self._n[budget]
        return MessageWindow(n, model=tokenizer.model, tokenizer=tokenizer, oversize="drop")


class _SizeTable:
    """Tokens of a case's context when it keeps the last k messages (question included)."""

    def __init__(self, case: Case, tokenizer: ChatTokenizer) -> None:
        history = [m for _, m in case.history]
        fixed = [m for m in history if m["role"] in SYSTEM_ROLES]
        rest = [tokenizer.message_tokens(m) for m in history if m["role"] not in SYSTEM_ROLES]
        self.base = tokenizer.count([*fixed, case.prompt])
        # suffix[k] = tokens of the last k history messages
        self.suffix = [0, *itertools.accumulate(reversed(rest))]

    def size(self, k: int) -> int:
        return self.base + self.suffix[min(max(k - 1, 0), len(self.suffix) - 1)]


def _mean(sizes: Sequence[_SizeTable], k: int) -> float:
    return sum(s.size(k) for s in sizes) / len(sizes)


class HybridNoRecall(_WindowStrategy):
    """``PriorityWindow`` with compression before eviction and a rolling summary, no archive.

    The window ``ctxwindow.context.hybrid_policy`` builds. ``entry ids``
    survive compression, so a compressed or summarized evidence message counts
    only when the answer is still in the context.
    """

    name = "hybrid_norecall"
    summary = True

    def window(self, budget: int, tokenizer: ChatTokenizer) -> Window:
        from ctxwindow.context import hybrid_policy

        return hybrid_policy(summary=self.summary)(budget, tokenizer)


class HybridNoSummary(HybridNoRecall):
    """The hybrid window without the rolling summary and without recall."""

    name = "hybrid_nosummary"
    summary = False


class HybridStrategy(Strategy):
    """The whole hybrid: ``ContextManager`` with the hybrid window and recall from an archive.

    History goes through a ``ContextManager`` (in-memory store, SQLite FTS5
    archive in memory); what the window evicts is archived, and the question
    recalls archived units into the context as ``ctxwindow.recall`` decides.
    ``hybrid_dense`` adds dense embeddings (the ``embeddings`` extra) fused
    with the lexical ranking.
    """

    name = "hybrid"
    dense = False

    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        from ctxwindow.archive.sqlite import SQLiteArchive
        from ctxwindow.context import ContextManager
        from ctxwindow.stores.memory import MemoryStore

        assert budget is not None
        archive = SQLiteArchive(embedder=self._embedder()) if self.dense else SQLiteArchive()
        manager = ContextManager(
            MemoryStore(), tokenizer.model, archive=archive, budget=budget, reserve_output=0,
            prefetch=False,
        )  # fmt: skip
        return _Ingested(manager)

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        entry = state.holder.add("case", message, metadata={"id": message_id})
        state.dataset_ids[entry.id] = message_id

    def build(self, state: Any, case: Case) -> Built:
        context = state.holder.preview("case", case.prompt)
        decisions = context.report.decisions
        now = {d.id for d in decisions if d.action in ("kept", "pinned", "recalled")}
        compressed = {d.id for d in decisions if d.action == "compressed"}
        summarized = {d.id for d in decisions if d.action == "summarized"}
        ids = state.dataset_ids
        whole = {ids[i] for i in now - compressed if i in ids}
        partial = {ids[i] for i in (now & compressed) | summarized if i in ids}
        return Built(context.messages, frozenset(whole), frozenset(partial - whole))

    def _embedder(self) -> Any:
        from ctxwindow.archive.embedders import MiniLMEmbedder

        return _shared_embedder(MiniLMEmbedder)


class HybridDense(HybridStrategy):
    """``hybrid`` with lexical and dense recall fused (needs the ``embeddings`` extra)."""

    name = "hybrid_dense"
    dense = True


class Retrieval(Strategy):
    """Plain retrieval, the baseline recall must beat: every past turn ranked against the question.

    Each history message is indexed (SQLite FTS5 BM25, the archive's ranking,
    with no neighbours, window or summary); the best-ranked messages that fit
    the budget, best first, are sent in their original order, then the
    question. A message in a tool unit is sent with its whole unit.
    """

    name = "bm25"

    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        from ctxwindow.archive.sqlite import SQLiteArchive

        assert budget is not None
        return _Retrieved(SQLiteArchive(), budget, tokenizer)

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        from ctxwindow.messages import Entry

        tokens = state.tokenizer.message_tokens(message)
        entry = Entry(message, tokens, len(state.ids) + 1, id=message_id)
        state.archive.index("case", [entry])
        state.ids.append(message_id)
        state.messages.append(message)
        state.units.append(_unit_start(state, message))
        state.tokens.append(tokens)

    def build(self, state: Any, case: Case) -> Built:
        prompt_tokens = state.tokenizer.count([case.prompt])
        room = state.budget - prompt_tokens
        chosen: set[int] = set()
        used = 0
        for hit in state.archive.search("case", case.question.question, k=len(state.ids) or 1):
            unit = state.unit_of(hit.entry.seq - 1)
            size = sum(state.tokens[i] for i in unit)
            if chosen.intersection(unit) or used + size > room:
                continue
            chosen.update(unit)
            used += size
        messages = [state.messages[i] for i in sorted(chosen)]
        return Built([*messages, case.prompt], frozenset(state.ids[i] for i in chosen))


@dataclass
class _Retrieved:
    """What ``Retrieval`` keeps: the index, and each message's tokens and tool unit."""

    archive: Any
    budget: int
    tokenizer: ChatTokenizer
    ids: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    units: list[int] = field(default_factory=list)  # index of the message starting each unit

    def unit_of(self, index: int) -> range:
        start = self.units[index]
        end = index + 1
        while end < len(self.units) and self.units[end] == start:
            end += 1
        return range(start, end)


def _unit_start(state: _Retrieved, message: Message) -> int:
    """Where the unit of a new message starts: a tool result belongs to its call's unit."""
    index = len(state.units)
    return state.units[-1] if message["role"] == "tool" and state.units else index


_embedders: dict[type, Any] = {}


def _shared_embedder(kind: type) -> Any:
    """One embedding model per process: loading it is the slow part."""
    if kind not in _embedders:
        _embedders[kind] = kind()
    return _embedders[kind]


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

for _strategy in (
    MessageWindowStrategy,
    TokenWindowStrategy,
    HybridStrategy,
    HybridDense,
    HybridNoRecall,
    HybridNoSummary,
    FullHistory,
    Retrieval,
):
    register_strategy(_strategy.name, _strategy)
