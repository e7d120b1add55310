"""The ``TokenCounter`` protocol and the backends that ship in the core.

A counter turns text into token ids and back. Chat framing (per-message
overhead, reply priming, tool schemas) lives in :mod:`ctxwindow.tokens.chat`,
on top of any counter.
"""

from __future__ import annotations

import hashlib
import math
import threading
import unicodedata
import warnings
from collections import OrderedDict
from typing import Protocol, runtime_checkable

from ctxwindow.errors import CtxWindowError
from ctxwindow.tokens.encodings import get_encoding


@runtime_checkable
class TokenCounter(Protocol):
    """What every tokenizer backend provides."""

    name: str
    exact: bool  # False for estimators: counts are not what the provider bills

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def count(self, text: str) -> int: ...


class TiktokenCounter:
    """An OpenAI encoding (``cl100k_base``, ``o200k_base``) through tiktoken, offline.

    Special-token text such as ``<|endoftext|>`` inside user content is counted
    as ordinary text, which is how the API treats it.
    """

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.name = encoding
        self._encoding = get_encoding(encoding)

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def decode(self, ids: list[int]) -> str:
        return self._encoding.decode(ids)

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))


class BpeOpenAICounter:
    """The same encodings through the Rust core of the ``bpe-openai`` package.

    Identical ids to tiktoken on every sample the contract tests try. It
    refuses very long inputs (about 200k tokens) and loads slower, so
    ``TiktokenCounter`` stays the reference and the default; see
    ``benchmarks/bench_windows.py`` for the measured difference.
    """

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        with warnings.catch_warnings():
            # bpe-openai reads its data with a deprecated importlib API; not ours to fix.
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            import bpe_openai

            self._encoding = bpe_openai.get_encoding(encoding)
        self.name = encoding

    def encode(self, text: str) -> list[int]:
        return list(self._encoding.encode_ordinary(text))

    def decode(self, ids: list[int]) -> str:
        return str(self._encoding.decode(ids))

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))


class EstimateCounter:
    """A character-based estimate for models whose tokenizer is not public (e.g. Claude).

    Never chosen silently: constructing one warns. Each CJK or emoji character
    counts as one token, every other run of four characters as one token, and
    the sum is multiplied by ``margin`` (default 1.2) so that budgets built on
    it err on the safe side. ``encode`` returns placeholder ids (one per
    estimated token) so it fits the protocol; ``decode`` cannot invert them.
    """

    exact = False

    def __init__(self, margin: float = 1.2, chars_per_token: float = 4.0) -> None:
        if margin < 1.0 or chars_per_token <= 0:
            raise ValueError("margin must be >= 1.0 and chars_per_token > 0")
        self.name = f"estimate(margin={margin})"
        self.margin = margin
        self.chars_per_token = chars_per_token
        warnings.warn(
            "ctxwindow is estimating token counts (no exact tokenizer for this model); "
            f"counts include a x{margin} safety margin",
            EstimateWarning,
            stacklevel=2,
        )

    def count(self, text: str) -> int:
        wide = sum(1 for ch in text if _is_wide(ch))
        narrow = len(text) - wide
        return math.ceil((wide + narrow / self.chars_per_token) * self.margin)

    def encode(self, text: str) -> list[int]:
        return [0] * self.count(text)

    def decode(self, ids: list[int]) -> str:
        raise CtxWindowError("an estimate cannot be decoded back to text")


class EstimateWarning(UserWarning):
    """Token counts are estimated, not exact."""


def _is_wide(ch: str) -> bool:
    if ord(ch) >= 0x1F000:  # emoji and pictographs: usually one token or more each
        return True
    return unicodedata.east_asian_width(ch) in ("W", "F")


class CachedCounter:
    """Wraps a counter so each distinct text is tokenized once per process.

    Keys are a BLAKE2b digest of the text (so the cache does not keep large
    texts alive); at most ``maxsize`` counts are kept, least recently used
    first out. Thread-safe.
    """

    def __init__(self, counter: TokenCounter, maxsize: int = 65_536) -> None:
        self.inner = counter
        self.name = counter.name
        self.exact = counter.exact
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids)

    def count(self, text: str) -> int:
        if len(text) < 16:  # hashing costs more than the lookup saves
            return self.inner.count(text)
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            cached = self._counts.get(key)
            if cached is not None:
                self._counts.move_to_end(key)
                self.hits += 1
                return cached
        n = self.inner.count(text)
        with self._lock:
            self.misses += 1
            self._counts[key] = n
            if len(self._counts) > self.maxsize:
                self._counts.popitem(last=False)
        return n
