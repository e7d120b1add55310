"""The BM25 index of the lexical baselines: bm25s's Lucene BM25, kept incrementally.

A text's terms are ctxwindow's own segmentation (``index_text``: NFKC, accents
off Latin letters, emoji as tokens, each run of Chinese, Japanese or Korean
cut into bigrams) put through bm25s's tokenizer unchanged (English stop words
out, Snowball stems by PyStemmer), cached by text. ``Lexical`` adds a
message's postings as it is ingested and scores a query with bm25s's formula
(k1 1.5, b 0.75, ``method="lucene"``), so a build reads it and changes
nothing. bm25s and PyStemmer come with the ``eval`` extra.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float64]

K1 = 1.5
B = 0.75


@functools.cache
def load_bm25s() -> tuple[Any, Any]:
    """bm25s and an English Snowball stemmer (the ``eval`` extra)."""
    from ctxwindow.extras import require

    require("eval", "the lexical baselines (bm25_fill...)", packages=("bm25s", "Stemmer"))
    bm25s = importlib.import_module("bm25s")
    stemmer = importlib.import_module("Stemmer").Stemmer("english")
    return bm25s, stemmer


_terms: dict[str, tuple[str, ...]] = {}


def terms(text: str) -> tuple[str, ...]:
    """The BM25 terms of a text: ctxwindow's segmentation, then bm25s's tokenizer (lower
    case, words of two or more characters, English stop words out, Snowball stems).

    >>> terms("The dogs were running in 东京都")
    ('dog', 'were', 'run', '东京', '京都')
    """
    found = _terms.get(text)
    if found is None:
        from ctxwindow.archive.text import index_text

        bm25s, stemmer = load_bm25s()
        tokens = bm25s.tokenize(
            [index_text(text)], stopwords="en", stemmer=stemmer, return_ids=False,
            show_progress=False,
        )  # fmt: skip
        found = _terms[text] = tuple(tokens[0])
    return found


@dataclass
class Lexical:
    """An incremental BM25 index: postings added message by message, scored at the query
    exactly as ``bm25s.BM25(k1=1.5, b=0.75, method="lucene")`` scores the same terms."""

    postings: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    lengths: list[int] = field(default_factory=list)
    total: int = 0

    def add(self, document: Sequence[str]) -> None:
        index = len(self.lengths)
        for term, tf in Counter(document).items():
            docs, tfs = self.postings.setdefault(term, ([], []))
            docs.append(index)
            tfs.append(tf)
        self.lengths.append(len(document))
        self.total += len(document)

    def scores(self, query: Sequence[str]) -> Vector:
        """Each document's score for the query terms (a repeated term counts each time)."""
        import numpy as np

        n = len(self.lengths)
        scores = np.zeros(n)
        if not self.total:
            return scores
        lengths = np.asarray(self.lengths, dtype=np.float64)
        norm = K1 * (1 - B + B * lengths / (self.total / n))
        for term, count in Counter(query).items():
            if term not in self.postings:
                continue
            docs, tfs = (np.asarray(values) for values in self.postings[term])
            df = len(docs)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            scores[docs] += count * idf * tfs / (norm[docs] + tfs)
        return scores
