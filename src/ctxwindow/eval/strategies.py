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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ctxwindow.eval.dataset import Conversation, Question
from ctxwindow.messages import Message
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
    # The extra it needs beyond ``eval`` (``ctxwindow eval`` checks it before any work).
    extra: ClassVar[str | None] = None

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
    "hybrid_dense": "ctxwindow.eval.recall_strategies:HybridDense",
    "hybrid_nocache": "ctxwindow.eval.recall_strategies:HybridNoCache",
    "hybrid_norecall": "ctxwindow.eval.window_strategies:HybridNoRecall",
    "hybrid_nosummary": "ctxwindow.eval.window_strategies:HybridNoSummary",
    "full": "ctxwindow.eval.window_strategies:FullHistory",
    "bm25": "ctxwindow.eval.recall_strategies:Retrieval",
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
