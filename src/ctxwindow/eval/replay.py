"""Turn-by-turn replay: what a provider's prompt cache serves, and what each turn costs.

At every user turn of a conversation the strategy builds the context it would
send (``Strategy.respond``); ``CacheMeter`` compares it with the contexts sent
before and counts the tokens the provider would serve from its prompt cache:

- ``"prefix"`` (OpenAI): the longest prefix shared with the previous turn's
  context, from 1,024 tokens on, in steps of 128 tokens;
- ``"breakpoints"`` (Anthropic): a breakpoint ends each context (the last
  message carries ``cache_control``); what a previous breakpoint wrote is read
  back if the context still starts with it (1,024 tokens at least), and the
  rest up to the new breakpoint is written (billed at the write price).

Prefixes are compared message by message (a message is the same if its JSON
is), so a prefix that ends inside a message is not counted: a slight
under-count, the same for every strategy. Prices are the model's
(``ModelInfo.input_cost``); a model with no cache price known is billed at
its input price for cached tokens too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ctxwindow.messages import Message
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.models import ModelInfo

MIN_CACHED = 1024  # the shortest prefix either provider caches
STEP = 128  # OpenAI serves cached prefixes in steps of this many tokens
BREAKPOINTS_KEPT = 20  # Anthropic's lookback: entries older than this many turns are not read


@dataclass
class Replayed:
    """What the turns of one or more replayed conversations cost."""

    turns: int = 0
    tokens: int = 0  # prompt tokens sent
    cached: int = 0  # of them served from the cache
    written: int = 0  # of them written to it (Anthropic)
    usd: float = 0.0
    per_turn: list[float] = field(default_factory=list)  # $ of each turn, in order

    def add(self, other: Replayed) -> None:
        self.turns += other.turns
        self.tokens += other.tokens
        self.cached += other.cached
        self.written += other.written
        self.usd += other.usd

    def summary(self) -> dict[str, Any]:
        """The ``replay`` entry of ``results[STRATEGY][BUDGET]``."""
        return {
            "turns": self.turns,
            "cached_share": round(self.cached / self.tokens, 6) if self.tokens else 0.0,
            "input_usd_per_turn": round(self.usd / self.turns, 10) if self.turns else 0.0,
            "mean_tokens": round(self.tokens / self.turns, 2) if self.turns else 0.0,
            "written_share": round(self.written / self.tokens, 6) if self.tokens else 0.0,
        }


class CacheMeter:
    """Counts what the provider's prompt cache serves of each context sent, turn by turn."""

    def __init__(self, tokenizer: ChatTokenizer, info: ModelInfo) -> None:
        self.tokenizer = tokenizer
        self.info = info
        self.kind = info.cache or "prefix"
        self.replayed = Replayed()
        self._previous: list[bytes] = []  # the previous context's message digests
        self._previous_sizes: list[int] = []
        self._written: dict[bytes, int] = {}  # prefix digest -> tokens, of past breakpoints
        self._order: list[bytes] = []

    def sent(self, messages: Sequence[Message]) -> None:
        """One turn's context: count it, priced."""
        digests = _chain(messages)
        sizes = [self.tokenizer.message_tokens(m) for m in messages]
        total = self.tokenizer.count(list(messages))
        if self.kind == "breakpoints":
            cached, written = self._breakpoints(digests, sizes, total)
        else:
            cached, written = self._prefix(digests, sizes), 0
        self._previous, self._previous_sizes = digests, sizes
        usd = self.info.input_cost(total, cached, written)
        turn = self.replayed
        turn.turns += 1
        turn.tokens += total
        turn.cached += cached
        turn.written += written
        turn.usd += usd
        turn.per_turn.append(usd)

    def _prefix(self, digests: list[bytes], sizes: list[int]) -> int:
        common = 0
        for now, before, size in zip(digests, self._previous, sizes, strict=False):
            if now != before:
                break
            common += size
        if common < MIN_CACHED:
            return 0
        return MIN_CACHED + (common - MIN_CACHED) // STEP * STEP

    def _breakpoints(self, digests: list[bytes], sizes: list[int], total: int) -> tuple[int, int]:
        read = 0
        for digest in reversed(digests):  # the longest prefix a past breakpoint wrote
            if digest in self._written:
                read = self._written[digest]
                break
        end = sum(sizes)  # the breakpoint: the end of the last message
        if end < MIN_CACHED or not digests:
            return 0, 0
        self._written[digests[-1]] = end
        self._order.append(digests[-1])
        if len(self._order) > BREAKPOINTS_KEPT:
            self._written.pop(self._order.pop(0), None)
        return read, max(0, end - read)


def _chain(messages: Sequence[Message]) -> list[bytes]:
    """Each prefix of ``messages`` as one digest: equal digests, equal prefixes."""
    out: list[bytes] = []
    running = hashlib.blake2b(digest_size=16)
    for message in messages:
        running.update(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))
        out.append(running.copy().digest())
    return out


def mean_by_turn(series: Sequence[Sequence[float]]) -> list[float]:
    """The mean cost of turn i over the conversations that have a turn i."""
    longest = max((len(s) for s in series), default=0)
    out = []
    for i in range(longest):
        values = [s[i] for s in series if len(s) > i]
        out.append(round(sum(values) / len(values), 10))
    return out
