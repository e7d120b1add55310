"""Trying compressors in order until one reaches the target."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwindow.compress.base import Compressor, total_tokens
from ctxwindow.errors import CompressionError
from ctxwindow.messages import Entry


class Chain:
    """Try each compressor on the original entries; the first result within target wins.

    If none reaches the target, the smallest result is returned (the earliest
    on a tie). A chain is itself a compressor, named ``chain(a,b,...)``.

    >>> from ctxwindow.tokens import chat_tokenizer
    >>> from ctxwindow.compress import Extractive, Structured, Truncate
    >>> tok = chat_tokenizer("gpt-4o")
    >>> Chain(Structured(tok), Extractive(tok), Truncate(tok)).name
    'chain(structured,extractive,truncate)'
    """

    def __init__(self, *compressors: Compressor) -> None:
        if not compressors:
            raise CompressionError("a Chain needs at least one compressor")
        self.compressors = compressors
        self.name = f"chain({','.join(c.name for c in compressors)})"

    def __call__(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]:
        if total_tokens(entries) <= target_tokens:
            return list(entries)
        smallest: list[Entry] | None = None
        for compressor in self.compressors:
            result = compressor(entries, target_tokens)
            size = total_tokens(result)
            if size <= target_tokens:
                return result
            if smallest is None or size < total_tokens(smallest):
                smallest = result
        assert smallest is not None
        return smallest
