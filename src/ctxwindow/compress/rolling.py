"""A rolling summary of evicted history, folded in incrementally, capped by its budget."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ctxwindow.compress import prompt
from ctxwindow.compress.base import Compressor
from ctxwindow.compress.llm import LLMSummarizer, merged_entry
from ctxwindow.errors import CompressionError
from ctxwindow.messages import Entry, Message
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.truncate import truncate_text


class RollingSummary:
    """Fold evicted units into one pinned summary entry: old summary + evicted → new summary.

    The new entry has kind ``"summary"``, ``pinned=True``, the old summary's
    id (or a new one derived from what it summarizes), the place (``seq``) of
    the earliest source, and ``metadata["summarized_ids"]``: every original
    entry id folded in so far, and ``metadata["compressed"]["by"]`` says what
    made it (``rolling(llm)``, ``rolling(extractive)``, ``rolling(verbatim)``).
    It is never larger than ``budget_tokens``:
    whatever the summarizer returns (a model summary, or the fallback's
    extractive form rendered as ``role: text`` lines) is cut head and tail to
    fit. ``tokenizer`` defaults to the summarizer's.
    """

    def __init__(self, summarizer: Compressor, tokenizer: ChatTokenizer | None = None) -> None:
        found = tokenizer or getattr(summarizer, "tokenizer", None)
        if not isinstance(found, ChatTokenizer):
            raise CompressionError("RollingSummary needs a tokenizer (the summarizer has none)")
        self.summarizer = summarizer
        self.tokenizer = found

    def fold(self, summary: Entry | None, evicted: Sequence[Entry], budget_tokens: int) -> Entry:
        """The summary of ``summary`` and ``evicted`` within ``budget_tokens`` (never blocks)."""
        sources = _sources(summary, evicted)
        if summary is not None and not evicted and summary.tokens <= budget_tokens:
            return summary
        return self._finish(
            summary, sources, self.summarizer(sources, budget_tokens), budget_tokens
        )

    async def afold(
        self, summary: Entry | None, evicted: Sequence[Entry], budget_tokens: int
    ) -> Entry:
        """Like ``fold``, but awaits an ``LLMSummarizer``'s summary instead of its fallback."""
        sources = _sources(summary, evicted)
        if summary is not None and not evicted and summary.tokens <= budget_tokens:
            return summary
        if isinstance(self.summarizer, LLMSummarizer):
            result = await self.summarizer.summarize(sources, budget_tokens)
        else:
            result = self.summarizer(sources, budget_tokens)
        return self._finish(summary, sources, result, budget_tokens)

    def _finish(
        self, summary: Entry | None, sources: list[Entry], result: list[Entry], budget: int
    ) -> Entry:
        text = "\n".join(_line(entry) for entry in result)
        message = self._fit(text, budget)
        by = f"rolling({_producer(result, sources)})"
        if summary is None:
            entry = merged_entry(sources, message, self.tokenizer, by)
            return dataclasses.replace(entry, pinned=True)
        # The summary keeps its id: no digest of every id folded so far (it grows).
        entry = merged_entry(sources, message, self.tokenizer, by, entry_id=summary.id)
        metadata = dict(summary.metadata, **entry.metadata)
        return dataclasses.replace(entry, pinned=True, metadata=metadata)

    def _fit(self, text: str, budget: int) -> Message:
        """A summary message of ``text``, cut head and tail to at most ``budget`` tokens."""
        heading = prompt.heading_for(text)
        room = budget - self.tokenizer.message_tokens(prompt.summary_message(heading, ""))
        if room < 0:
            raise CompressionError(
                f"a summary budget of {budget} tokens is below an empty summary message"
            )
        while True:
            cut = truncate_text(text, room, self.tokenizer.counter)
            message = prompt.summary_message(heading, cut)
            if room <= 0 or self.tokenizer.message_tokens(message) <= budget:
                return message
            room -= 1  # joined to the heading, the cut text counted a token more than alone


def _sources(summary: Entry | None, evicted: Sequence[Entry]) -> list[Entry]:
    sources = ([summary] if summary is not None else []) + list(evicted)
    if not sources:
        raise CompressionError("nothing to fold: no summary and no evicted entries")
    return sources


def _producer(result: list[Entry], sources: list[Entry]) -> str:
    """The compressor that made the new entries of ``result`` (``verbatim`` if none)."""
    for entry in result:
        record = entry.metadata.get("compressed")
        if all(entry is not s for s in sources) and isinstance(record, dict):
            return str(record.get("by"))
    return "verbatim"


def _line(entry: Entry) -> str:
    """A summarizer's output entry as a line of the rolling summary."""
    if entry.kind == "summary":
        return prompt.strip_heading(prompt.content_text(entry.message.get("content")))
    return prompt.render(entry)
