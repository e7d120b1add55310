"""The evaluation strategies that search past turns: the whole hybrid, and plain retrieval.

``hybrid`` (and ``hybrid_words``, ``hybrid_minilm``) is the ``ContextManager``, whose window
evicts to an archive that the question recalls from; ``bm25`` ranks every
past turn against the question, the baseline recall must beat. Registered by
name in ``ctxwindow.eval.strategies``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctxwindow.eval.strategies import Built, Case, Strategy
from ctxwindow.eval.window_strategies import Ingested
from ctxwindow.messages import Message
from ctxwindow.tokens.chat import ChatTokenizer


class HybridStrategy(Strategy):
    """The whole hybrid: ``ContextManager`` with the hybrid window and recall from an archive.

    History goes through a ``ContextManager`` (in-memory store, a
    ``SQLiteArchive`` in memory: its bounded BM25 over per-session postings);
    every turn is archived, and the question recalls archived units into the
    context as ``ctxwindow.recall`` decides.
    The archive ranks by BM25 fused with the cosine of ctxwindow's default
    embedder (``E5SmallEmbedder``, the ``dense`` extra, which ``eval`` brings),
    as the service does by default; ``hybrid_words`` is the same without the
    embedder (what an install without the ``dense`` extra gets) and
    ``hybrid_minilm`` the same with all-MiniLM-L6-v2 (the ``embeddings`` extra).
    """

    name = "hybrid"
    dense = True
    extra: ClassVar[str | None] = "dense"
    prompt_cache = True

    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        from ctxwindow.archive.sqlite import SQLiteArchive
        from ctxwindow.context import ContextManager
        from ctxwindow.stores.memory import MemoryStore

        assert budget is not None
        archive = SQLiteArchive(embedder=self._embedder()) if self.dense else SQLiteArchive()
        manager = ContextManager(
            MemoryStore(), tokenizer.model, archive=archive, budget=budget, reserve_output=0,
            prefetch=False, prompt_cache=self.prompt_cache,
        )  # fmt: skip
        return Ingested(manager)

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        entry = state.holder.add("case", message, metadata={"id": message_id})
        state.dataset_ids[entry.id] = message_id

    def respond(self, state: Any, message_id: str, message: Message) -> list[Message]:
        self.ingest(state, message_id, message)
        return state.holder.build("case").messages  # type: ignore[no-any-return]

    def build(self, state: Any, case: Case) -> Built:
        from ctxwindow.eval.strategies import compressed_texts

        context = state.holder.preview("case", case.prompt)
        decisions = context.report.decisions
        now = {d.id for d in decisions if d.in_context}
        compressed = {d.id for d in decisions if d.state == "compressed"}
        summarized = {d.id for d in decisions if d.state == "summarized"}
        ids = state.dataset_ids
        whole = {ids[i] for i in now - compressed if i in ids}
        partial = {ids[i] for i in (now & compressed) | summarized if i in ids} - whole
        texts = compressed_texts(context.messages, decisions, ids)
        sent_as = {mid: text for mid, text in texts.items() if mid in partial}
        return Built(context.messages, frozenset(whole), frozenset(partial), sent_as)

    def _embedder(self) -> Any:
        from ctxwindow.archive.embedders import E5SmallEmbedder
        from ctxwindow.eval.vector_cache import shared_cached

        return shared_cached(E5SmallEmbedder)  # a text embedded once, ever


class HybridNoCache(HybridStrategy):
    """``hybrid`` with the prompt cache out of mind: the window slides message by message,
    and recalled turns go back where they were said, different on every turn."""

    name = "hybrid_nocache"
    prompt_cache = False


class HybridWords(HybridStrategy):
    """``hybrid`` searching by words alone (BM25): the default without the ``dense`` extra."""

    name = "hybrid_words"
    dense = False
    extra = None


class HybridMiniLM(HybridStrategy):
    """``hybrid`` with all-MiniLM-L6-v2 as the embedder (needs the ``embeddings`` extra)."""

    name = "hybrid_minilm"
    extra = "embeddings"

    def _embedder(self) -> Any:
        from ctxwindow.archive.embedders import MiniLMEmbedder
        from ctxwindow.eval.vector_cache import shared_cached

        return shared_cached(MiniLMEmbedder)  # a text embedded once, ever


class Retrieval(Strategy):
    """Plain retrieval, the baseline recall must beat: every past turn ranked against the question.

    Each history message is indexed (the ``SQLiteArchive``'s BM25 ranking,
    with no neighbours, window or summary); the best-ranked messages that fit
    the budget, best first, are sent in their original order, then the
    question. A message in a tool unit is sent with its whole unit.
    """

    name = "bm25"
    baseline = True

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
        chosen = self._chosen(state, case.question.question, case.prompt)
        messages = [state.messages[i] for i in sorted(chosen)]
        return Built([*messages, case.prompt], frozenset(state.ids[i] for i in chosen))

    def respond(self, state: Any, message_id: str, message: Message) -> list[Message]:
        from ctxwindow.policies.rules import text_of

        chosen = self._chosen(state, text_of(message), message) if state.ids else set()
        self.ingest(state, message_id, message)
        return [*(state.messages[i] for i in sorted(chosen)), message]

    def _chosen(self, state: Any, query: str, prompt: Message) -> set[int]:
        """The indexes of the history messages sent with ``prompt``."""
        from ctxwindow.eval.baselines import fill

        room = state.budget - state.tokenizer.count([prompt])
        hits = state.archive.search("case", query, k=len(state.ids) or 1)
        chosen: set[int] = set()
        fill((hit.entry.seq - 1 for hit in hits), state.units, state.tokens, room, chosen)
        return chosen


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


def _unit_start(state: _Retrieved, message: Message) -> int:
    """Where the unit of a new message starts: a tool result belongs to its call's unit."""
    from ctxwindow.eval.baselines import unit_start

    return unit_start(state.units, message)
