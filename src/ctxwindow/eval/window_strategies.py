"""The evaluation strategies that are a window alone, with no recall of what it evicted.

``full`` (everything, unbounded), ``token_window``, ``message_window``, and
the hybrid window without recall (``hybrid_norecall``, ``hybrid_nosummary``).
Registered by name in ``ctxwindow.eval.strategies``.
"""

from __future__ import annotations

import bisect
import itertools
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwindow.compress.rolling import DRAWS_ON
from ctxwindow.eval.strategies import Built, Case, Strategy
from ctxwindow.messages import SYSTEM_ROLES, Message
from ctxwindow.policies import MessageWindow, TokenWindow, Window
from ctxwindow.policies.rules import text_of
from ctxwindow.tokens.chat import ChatTokenizer


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

    def respond(self, state: Any, message_id: str, message: Message) -> list[Message]:
        self.ingest(state, message_id, message)
        return [message for _, message in state]


@dataclass
class Ingested:
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
        return Ingested(self.window(budget, tokenizer))

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        entry = state.holder.add(message, metadata={"id": message_id})
        if entry is not None:
            state.dataset_ids[entry.id] = message_id

    def respond(self, state: Any, message_id: str, message: Message) -> list[Message]:
        self.ingest(state, message_id, message)
        return state.holder.build().messages  # type: ignore[no-any-return]

    def build(self, state: Any, case: Case) -> Built:
        window: Window = state.holder
        context = window.preview(case.prompt)
        sent = {id(message) for message in context.messages}
        kept: set[str] = set()
        sent_as: dict[str, str] = {}  # a compressed or summarized message -> its text as sent
        for entry in window.entries():
            if id(entry.message) not in sent:
                continue
            mid = entry.metadata.get("id")
            if mid is not None and (
                "compressed" in entry.metadata or "truncated" in entry.metadata
            ):
                sent_as[mid] = text_of(entry.message)
            elif mid is not None:
                kept.add(mid)
            summarized = entry.metadata.get(DRAWS_ON, ())  # what the summary still carries
            ids = state.dataset_ids
            sent_as.update((ids[i], text_of(entry.message)) for i in summarized if i in ids)
        partial = frozenset(sent_as) - kept
        texts = {mid: text for mid, text in sent_as.items() if mid in partial}
        return Built(context.messages, frozenset(kept), partial, texts)


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
    only when the answer is in its own compressed form (or in the summary that
    still draws on it).
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
