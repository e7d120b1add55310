"""``FTS5Tokenizer``: SQLite's ``porter unicode61 remove_diacritics 2`` tokenizer, word by word.

``SQLiteArchive`` keeps its own postings (see ``ranking``), so it needs the
terms of a text, not an FTS5 index of it. Texts (already prepared by
``text.index_text``) are split into words of letters and digits here; each
distinct word is turned into its terms once by SQLite itself (case folded,
diacritics removed, Porter-stemmed: ``Shipping`` → ``ship``) and cached, so a
text costs a dictionary lookup per word. New words are learned in one batch:
written as one document into an in-memory, contentless FTS5 table, with a
marker token between them, and read back from its ``fts5vocab`` instance
table in order.

The terms of stop words (``text.STOP_WORDS``: ``the``, ``on``, ``other``...)
count in a text's length, as in FTS5's ``bm25()``, but are neither indexed
nor searched, whichever word they come from: ``one`` and ``others`` stem to
``on`` and ``other``, so an FTS5 query for them matched nearly every row, at
an IDF of nearly nothing, and leaving them out ranks as before (measured:
the same evidence recall on LoCoMo, where keeping them as words of their own
lost a question or two).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

from ctxwindow.archive.text import STOP_WORDS

TOKENIZER = "porter unicode61 remove_diacritics 2"
WORD = re.compile(r"[^\W_]+")
"""A word: letters and digits (``text.query_terms`` also keeps marks, which split words here)."""
_MARK = "\ue000"  # private use: a token for unicode61, never part of a WORD
_CACHED = 1 << 16


class FTS5Tokenizer:
    """Texts to FTS5 terms, on a connection that can create temporary tables.

    >>> tokenizer = FTS5Tokenizer(sqlite3.connect(":memory:"))
    >>> tokenizer.count("The parcel ships, shipping starts Monday")
    ({'parcel': 1, 'ship': 2, 'start': 1, 'mondai': 1}, 6)
    >>> tokenizer.query(["shipped", "Monday", "the", "one"])  # one: on, a stop word's term
    {'ship': 1, 'mondai': 1}
    """

    def __init__(self, db: sqlite3.Connection, name: str = "ctxwindow_words") -> None:
        self._db = db
        self._name = name
        self._table = f"temp.{name}"
        self._vocabulary = f"temp.{name}_vocabulary"
        self._terms: dict[str, tuple[str, ...]] = {}
        db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self._table}"
            f" USING fts5(words, content='', tokenize='{TOKENIZER}')"
        )
        db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self._vocabulary}"
            f" USING fts5vocab(temp, {name}, instance)"
        )
        self._learn(STOP_WORDS)
        self.stop_terms = frozenset(term for word in STOP_WORDS for term in self._terms[word])
        """The terms of the stop words, never indexed nor searched."""

    def count(self, text: str) -> tuple[dict[str, int], int]:
        """``(term -> frequency, length)``: the text's terms less stop words, and all its tokens."""
        return self.count_all([text])[0]

    def count_all(self, texts: list[str]) -> list[tuple[dict[str, int], int]]:
        """``count`` for each text, learning their new words in one batch."""
        words = [WORD.findall(text) for text in texts]
        self._learn(word for text in words for word in text)
        terms, stop = self._terms, self.stop_terms
        counted = []
        for text in words:
            frequency: dict[str, int] = {}
            length = 0
            for word in text:
                found = terms[word]
                length += len(found)
                for term in found:
                    if term not in stop:
                        frequency[term] = frequency.get(term, 0) + 1
            counted.append((frequency, length))
        return counted

    def query(self, words: Iterable[str]) -> dict[str, int]:
        """``term -> how many times`` in a query's terms (``text.query_terms``), less stop terms."""
        split = [word for text in words for word in WORD.findall(text)]
        self._learn(split)
        counts: dict[str, int] = {}
        for word in split:
            for term in self._terms[word]:
                if term not in self.stop_terms:
                    counts[term] = counts.get(term, 0) + 1
        return counts

    def _learn(self, words: Iterable[str]) -> None:
        """Know the terms of every one of ``words`` (the caller looks each up next)."""
        wanted = dict.fromkeys(words)
        new = [word for word in wanted if word not in self._terms]
        if not new:
            return
        if len(self._terms) + len(new) > _CACHED:
            # Full: start again with this call's words, all of them, not only the new
            # ones (those known already would be cleared with the rest).
            self._terms.clear()  # stop_terms are kept apart
            new = list(wanted)
        db = self._db
        db.execute(
            f"INSERT INTO {self._table} (rowid, words) VALUES (1, ?)", (f" {_MARK} ".join(new),)
        )
        try:
            rows = db.execute(f"SELECT offset, term FROM {self._vocabulary}").fetchall()
        finally:
            db.execute(f"INSERT INTO {self._table} ({self._name}) VALUES ('delete-all')")
        rows.sort()
        found: list[list[str]] = [[]]
        for _, term in rows:
            if term == _MARK:
                found.append([])
            else:
                found[-1].append(term)
        self._terms.update(zip(new, map(tuple, found), strict=True))
