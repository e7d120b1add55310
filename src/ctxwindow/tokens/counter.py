"""The ``TokenCounter`` protocol and the backends that ship in the core.

A counter turns text into token ids and back. Chat framing (per-message
overhead, reply priming, tool schemas) lives in :mod:`ctxwindow.tokens.chat`,
on top of any counter.
"""

from __future__ import annotations

import math
import threading
import unicodedata
import warnings
from typing import Protocol, runtime_checkable

from ctxwindow.errors import CtxWindowError
from ctxwindow.extras import require
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

    Identical ids to tiktoken (a Hypothesis contract test compares them). Needs
    the ``bpe`` extra (74 MB installed). Measured by ``benchmarks/bench_windows.py``:
    it counts 1.3-1.5x faster on o200k_base and 1.8-2x on cl100k_base, but loads
    2-4x slower (~0.5 s) and
    refuses inputs above about 200k tokens, which a pasted document can
    reach. Tokenizing is ~13 us of a ~19 us window turn, so switching would
    save ~3 us a turn: ``TiktokenCounter`` stays the default and the reference.
    """

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        require("bpe", "BpeOpenAICounter")
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
    counts as ``tokens_per_wide`` tokens (default 1), every other run of
    ``chars_per_token`` characters (default 4) as one token, and the sum is
    multiplied by ``margin`` (default 1.2) so that budgets built on it err on
    the safe side (per-family values, measured: ``ctxwindow.tokens.models``).
    ``encode`` returns placeholder ids (one per estimated token) so it fits the
    protocol; ``decode`` cannot invert them.
    """

    exact = False

    def __init__(
        self, margin: float = 1.2, chars_per_token: float = 4.0, tokens_per_wide: float = 1.0
    ) -> None:
        if margin < 1.0 or chars_per_token <= 0 or tokens_per_wide <= 0:
            raise ValueError("margin must be >= 1.0, chars_per_token and tokens_per_wide > 0")
        self.name = f"estimate(margin={margin})"
        self.margin = margin
        self.chars_per_token = chars_per_token
        self.tokens_per_wide = tokens_per_wide
        warnings.warn(
            "ctxwindow is estimating token counts (no exact tokenizer for this model); "
            f"counts include a x{margin} safety margin",
            EstimateWarning,
            stacklevel=2,
        )

    def count(self, text: str) -> int:
        wide = sum(1 for ch in text if _is_wide(ch))
        narrow = len(text) - wide
        raw = wide * self.tokens_per_wide + narrow / self.chars_per_token
        return math.ceil(raw * self.margin)

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

    Keys are the text's 64-bit string hash (SipHash, randomized per process)
    and its length, so the cache does not keep large texts alive (texts under
    16 characters, such as roles and names, are their own key); at most
    ``maxsize`` counts are kept, the oldest out first. Lookups take no lock
    (a dict read is atomic); inserts do.
    """

    def __init__(self, counter: TokenCounter, maxsize: int = 65_536) -> None:
        self.inner = counter
        self.name = counter.name
        self.exact = counter.exact
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._counts: dict[tuple[int, int] | str, int] = {}
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids)

    def count(self, text: str) -> int:
        # Short texts (roles, names) are their own key: cheaper than hashing.
        key: tuple[int, int] | str = text if len(text) < 16 else (hash(text), len(text))
        cached = self._counts.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        n = self.inner.count(text)
        with self._lock:
            self.misses += 1
            self._counts[key] = n
            if len(self._counts) > self.maxsize:
                del self._counts[next(iter(self._counts))]
        return n
