"""Extractive compression: keep the most informative sentences, in their order.

No model, deterministic. Each sentence of the given texts is scored with
TF-IDF over all of them (a sentence is a document, so words that recur in
every message — boilerplate — weigh little): the sum of the idf of its
distinct terms (terms with digits — ids, numbers, dates — count 1.5x),
divided by the square root of its length, times a bonus for the first and
the last sentence of a text. The best sentences that fit are kept in their
original order; a gap is marked with ``" … "`` (and a cut head or tail with
``"… "`` / ``" …"``). Terms are words for Latin scripts and character bigrams
for CJK (see :mod:`ctxwindow.compress.sentences`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ctxwindow.compress.base import content_targets, has_text, total_tokens, with_content
from ctxwindow.compress.sentences import sentence_spans, terms
from ctxwindow.messages import Entry
from ctxwindow.tokens.chat import ChatTokenizer

OMISSION = " … "
DIGIT_WEIGHT = 1.5


@dataclass(frozen=True)
class _Text:
    text: str
    spans: list[tuple[int, int]]
    terms: list[list[str]]

    @classmethod
    def of(cls, text: str) -> _Text:
        spans = sentence_spans(text)
        return cls(text, spans, [terms(text[a:b]) for a, b in spans])

    def sentence(self, i: int) -> str:
        start, end = self.spans[i]
        return self.text[start:end]

    def _gap(self, i: int) -> str:
        """The original whitespace between sentence ``i`` and the next."""
        return self.text[self.spans[i][1] : self.spans[i + 1][0]]

    def render(self, kept: list[int]) -> str:
        """The kept sentences (sorted indexes) in order, gaps marked."""
        parts = ["… "] if kept[0] > 0 else []
        parts.append(self.sentence(kept[0]))
        for prev, i in itertools.pairwise(kept):
            parts.append(self._gap(prev) if i == prev + 1 else OMISSION)
            parts.append(self.sentence(i))
        if kept[-1] < len(self.spans) - 1:
            parts.append(" …")
        return "".join(parts)


def idf_table(texts: Sequence[_Text]) -> dict[str, float]:
    """Smoothed inverse document frequency of every term, one sentence = one document."""
    documents = [words for text in texts for words in text.terms]
    frequency = Counter(term for words in documents for term in set(words))
    n = len(documents)
    return {term: math.log((1 + n) / (1 + df)) + 1.0 for term, df in frequency.items()}


class Extractive:
    """Keep the highest-scoring sentences of each text up to its share of the target.

    A text whose best sentence alone does not fit (or that has one sentence)
    is left unchanged, so a ``Chain`` falls through to the next compressor.
    """

    name = "extractive"

    def __init__(
        self, tokenizer: ChatTokenizer, first_bonus: float = 0.25, last_bonus: float = 0.15
    ) -> None:
        self.tokenizer = tokenizer
        self.first_bonus = first_bonus
        self.last_bonus = last_bonus

    def __call__(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]:
        if total_tokens(entries) <= target_tokens:
            return list(entries)
        eligible = [has_text(entry) for entry in entries]
        rooms = content_targets(entries, target_tokens, self.tokenizer, eligible)
        if self._too_small(rooms, eligible):
            return list(entries)
        texts = [
            _Text.of(entry.message["content"]) if ok else None
            for entry, ok in zip(entries, eligible, strict=True)
        ]
        idf = idf_table([text for text in texts if text is not None])
        return [
            self._extract(entry, text, room, idf) if text is not None else entry
            for entry, text, room in zip(entries, texts, rooms, strict=True)
        ]

    def _too_small(self, rooms: list[int], eligible: list[bool]) -> bool:
        """Whether no room can hold a sentence and the marks around it (``_select`` pays a
        mark before the first sentence and one after each), so that every text would be
        left as it is: then none is read. A rolling summary's fold cuts a batch of a
        thousand short turns to four times its budget so, where each turn's share is a
        token or two, and read every turn for nothing (75 ms at 1,400 turns)."""
        least = 2 * self.tokenizer.text(OMISSION)
        return all(room < least for room, ok in zip(rooms, eligible, strict=True) if ok)

    def _extract(self, entry: Entry, text: _Text, room: int, idf: dict[str, float]) -> Entry:
        if len(text.spans) < 2 or self.tokenizer.text(text.text) <= room:
            return entry
        kept = self._select(text, self.scores(text, idf), room)
        if not kept:
            return entry
        return with_content(entry, text.render(kept), self.tokenizer, self.name)

    def scores(self, text: _Text, idf: dict[str, float]) -> list[float]:
        """The score of each sentence of ``text`` (position bonus included)."""
        last = len(text.spans) - 1
        return [
            _information(words, idf)
            * (1.0 + self.first_bonus * (i == 0) + self.last_bonus * (i == last))
            for i, words in enumerate(text.terms)
        ]

    def _select(self, text: _Text, scores: list[float], room: int) -> list[int]:
        """Indexes of the best sentences that fit in ``room`` tokens, in text order."""
        count = self.tokenizer.text
        separator = count(OMISSION)
        used = separator  # a cut head or tail is marked too
        kept: list[int] = []
        for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)):
            cost = count(text.sentence(i)) + separator
            if used + cost <= room:
                kept.append(i)
                used += cost
        while kept and count(text.render(sorted(kept))) > room:
            kept.pop()  # the estimate was short: drop the weakest kept sentence
        return sorted(kept)


def _information(words: list[str], idf: dict[str, float]) -> float:
    if not words:
        return 0.0
    weight = sum(idf[term] * _digit_weight(term) for term in dict.fromkeys(words))
    return weight / math.sqrt(len(words))


@functools.lru_cache(maxsize=65_536)
def _digit_weight(term: str) -> float:
    """Terms with a digit (ids, numbers, dates) weigh more; cached: terms recur."""
    return DIGIT_WEIGHT if any(ch.isdigit() for ch in term) else 1.0
