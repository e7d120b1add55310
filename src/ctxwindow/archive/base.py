"""The archive contract: where evicted entries go, and how they are found again.

An archive keeps whole entries per session and finds them by a query:

- ``index(session_id, entries, *, user_id=None, through=None) -> int``: store
  (or replace) entries, keyed by session and entry id; indexing the same entry
  again changes nothing and costs no embedding. Returns how many were new or
  changed. ``through`` raises the session's watermark in the same transaction.
- ``indexed_through(session_id) -> int``: the session's watermark: every entry
  up to that seq is archived, as callers of ``index`` said (0: none said).
- ``search(session_id, query, *, k=5, user_id=None, before=None) -> list[Hit]``:
  the best ``k`` entries of the session, or, with ``user_id``, of the session
  and every session indexed under that user; with ``before``, only the
  session's entries said before that seq.
- ``scores(session_id, query, *, k=5, before=None) -> list[(seq, score)]``: one
  session's ranking as ``search`` makes it, without reading the entries (recall
  reads those it has not cached with ``at``).
- ``at(session_id, seqs) -> list[Entry]``: the session's archived entries at
  these sequence numbers, in order (the neighbours of a hit, for recall).
- ``forget(session_id) -> int`` (entries and watermark), ``close()`` and
  context-manager support.

``Archive`` owns the pipeline (segmenting text, embedding, ranking, fusion);
a backend supplies storage and its lexical ranking. Backend failures raise
``StoreError`` (``StoreUnavailableError`` when the server or file cannot be
reached).
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple

from ctxwindow.archive.embedders import Embedder
from ctxwindow.archive.text import entry_text, index_text, query_terms
from ctxwindow.archive.vectors import Matrix, StoredVector, unit
from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import check_session_id, entry_from_json, entry_to_json

ASKED = 256
"""The query-form vectors of the newest user turns an archive keeps (``Archive._asked_vectors``):
a turn's search and its archiving come within a few turns of each other."""
MATRIX_ROWS = 100_000
"""Vectors the archive keeps in memory between searches, over every session (~150 MB at
384 dimensions); past it, the sessions searched longest ago are read again next time."""

TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")


def check_table_name(table: str) -> str:
    """Table names are plain SQL names (they are formatted into statements)."""
    if not isinstance(table, str) or not TABLE_NAME.fullmatch(table):
        raise ValueError(f"table must be a plain SQL name (letters, digits, _), got {table!r}")
    return table


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result, best first.

    ``score`` is the backend's lexical relevance (higher is better) when the
    archive has no embedder, else the fused score in [0, 1] (``fuse_scores``).
    ``lexical_rank`` and ``dense_rank`` (1 = best) say where each ranking put
    the entry, ``None`` where it did not rank it. ``session_id`` is the
    session the entry was archived in (useful in user-wide searches).
    """

    entry: Entry
    score: float
    lexical_rank: int | None
    dense_rank: int | None
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class Scope:
    """What a search looks at: one session, plus a user's sessions when ``user_id`` is set."""

    session_id: str
    user_id: str | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """An entry as a backend writes it."""

    entry_id: str
    seq: int
    json: str
    body: str
    """The text to index, already segmented (``text.index_text``)."""
    vector: list[float] | None
    replaces: bool = False
    """The session held another version of the entry when ``index`` looked."""


class Ranked(NamedTuple):
    """A row a ranking returned: its backend key, sequence number and score (a named tuple:
    a search makes hundreds, and a frozen dataclass costs twice as much to make)."""

    key: int
    seq: int
    score: float


class Fused(NamedTuple):
    """A row as a search ranks it: its score and where each ranking put it (``Hit``'s)."""

    key: int
    seq: int
    score: float
    lexical: int | None
    dense: int | None


class Archive(ABC):
    """Evicted entries, searchable by words (always) and by meaning (with an embedder)."""

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        min_similarity: float = 0.2,
        dense_weight: float = 0.4,
        depth: int = 50,
        reads_per_hit: int = 40,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        if reads_per_hit < 1:
            raise ValueError(f"reads_per_hit must be at least 1, got {reads_per_hit}")
        if not 0 <= dense_weight <= 1:
            raise ValueError(f"dense_weight is a share in [0, 1], got {dense_weight}")
        self.embedder = embedder
        self.min_similarity = min_similarity
        self.dense_weight = dense_weight
        self.depth = depth
        self.reads_per_hit = reads_per_hit
        self._matrices: OrderedDict[str, Matrix] = OrderedDict()  # by session, oldest first
        self._matrices_lock = threading.Lock()
        # The query form of the newest user turns' texts: a user turn is searched for as it
        # is asked and archived as a turn, embedded once for both (``_embed``, ``_dense``).
        self._asked: OrderedDict[str, list[float]] = OrderedDict()
        self._asked_lock = threading.Lock()

    def index(
        self,
        session_id: str,
        entries: Iterable[Entry],
        *,
        user_id: str | None = None,
        through: int | None = None,
    ) -> int:
        """Archive entries under the session (and user); returns how many were new or changed.

        ``through`` is the caller's word that every entry of the session up to
        that seq is now archived (by this call or earlier ones): it is recorded
        with the entries, in one transaction, as the session's watermark (see
        ``indexed_through``), which only ever rises.
        """
        check_session_id(session_id)
        if through is not None:
            _check_seqs([through])
        latest = {entry.id: entry for entry in entries}  # the last copy of an id wins
        stored = self._stored(session_id, list(latest)) if latest else {}
        changed = [
            (entry, json)
            for entry, json in ((e, _to_json(e)) for e in latest.values())
            if stored.get(entry.id) != (json, user_id)
        ]
        if changed or through is not None:
            documents = self._documents(changed, stored)
            self._write(session_id, user_id, documents, through)
            if any(document.replaces for document in documents):
                self._forget_vectors(session_id)  # rows changed in place
        return len(changed)

    def indexed_through(self, session_id: str) -> int:
        """The session's watermark: the highest ``through`` given to ``index`` (0 if none).

        Every entry of the session up to that seq is archived, so a manager
        that loads the session queues only the entries after it.
        """
        return self._indexed_through(check_session_id(session_id))

    def search(
        self,
        session_id: str,
        query: str,
        *,
        k: int = 5,
        user_id: str | None = None,
        before: int | None = None,
    ) -> list[Hit]:
        """The ``k`` entries that best match ``query``, best first (ties: lower seq first).

        ``before``: only entries said before that seq. A question archived as it
        is asked matches itself best, by every word and by meaning; searching
        what was said before it keeps that match from setting the scale that
        the other hits are measured on (a share of the best). Only for one
        session's search: other sessions' seqs say nothing of this one's order.
        """
        if before is not None and user_id is not None:
            raise ValueError("before applies to one session's search, not with user_id")
        ranked = self._ranked(Scope(check_session_id(session_id), user_id), query, k, before)
        rows = self._load([row.key for row in ranked])
        return [
            Hit(
                entry_from_json(rows[row.key][1]),
                row.score,
                row.lexical,
                row.dense,
                rows[row.key][0],
            )
            for row in ranked
            if row.key in rows  # forgotten between ranking and loading
        ]

    def scores(
        self, session_id: str, query: str, *, k: int = 5, before: int | None = None
    ) -> list[tuple[int, float]]:
        """``(seq, score)`` of the session's ``k`` best entries for ``query``, as ``search``
        ranks them, without reading the entries: a caller that holds some of them already
        reads the others with ``at`` (recall does, for the turns it has not cached)."""
        scope = Scope(check_session_id(session_id))
        rows: Sequence[Ranked | Fused]
        if self.embedder is None:  # words alone: their ranking, without the ranks
            rows = self._lexical_best(scope, query, k, before)[:k]
        else:
            rows = self._ranked(scope, query, k, before)
        return [(row.seq, row.score) for row in rows]

    def _ranked(self, scope: Scope, query: str, k: int, before: int | None) -> list[Fused]:
        """The ``k`` best rows of ``scope`` for ``query`` (said before ``before``), best first,
        with where each ranking put them."""
        lexical = self._lexical_best(scope, query, k, before)
        if self.embedder is None:
            return [
                Fused(row.key, row.seq, row.score, rank, None)
                for rank, row in enumerate(lexical[:k], 1)
            ]
        depth = max(k, self.depth)
        dense, floor = self._dense(scope, query, depth, before) if query.strip() else ([], 0.0)
        return fuse(lexical, dense, k, self.dense_weight, floor)

    def _lexical_best(self, scope: Scope, query: str, k: int, before: int | None) -> list[Ranked]:
        """The lexical ranking's best rows said before ``before``: ``self.depth`` of them, or
        ``k`` if more (fusion draws on more than it returns)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        depth = max(k, self.depth)
        terms = query_terms(query)
        budget = self.reads_per_hit * depth  # postings a search may read (archive.ranking)
        later = 0 if before is None else LATER
        lexical = self._lexical(scope, terms, depth + later, budget) if terms else []
        return _said_before(lexical, before)[:depth]

    def at(self, session_id: str, seqs: Iterable[int]) -> list[Entry]:
        """The session's archived entries at these seqs, in order (absent ones left out)."""
        wanted = list(set(seqs))
        _check_seqs(wanted)
        if not wanted:
            return []
        wanted.sort()
        rows = self._at(check_session_id(session_id), wanted)
        return sorted((entry_from_json(json) for json in rows), key=lambda entry: entry.seq)

    def forget(self, session_id: str) -> int:
        """Remove everything archived for the session, watermark included; returns how many
        entries were removed."""
        removed = self._forget(check_session_id(session_id))
        self._forget_vectors(session_id)
        return removed

    def close(self) -> None:  # noqa: B027 - archives without resources need nothing
        """Release connections and files."""

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _documents(self, changed: list[tuple[Entry, str]], stored: Iterable[str]) -> list[Document]:
        if not changed:
            return []
        texts = [entry_text(entry) for entry, _ in changed]
        vectors = self._embed(texts, [entry.message["role"] == "user" for entry, _ in changed])
        return [
            Document(entry.id, entry.seq, json, index_text(text), vector, entry.id in stored)
            for (entry, json), text, vector in zip(changed, texts, vectors, strict=True)
        ]

    def _embed(self, texts: list[str], asked: list[bool]) -> list[list[float] | None]:
        """Unit vectors for the texts that have words; ``None`` for the rest or without embedder.

        A user's turn (``asked``) is embedded in the query form, the others as passages
        (where the embedder tells them apart): the newest user turn is also the query of
        the search that follows it, and one embedding serves both (``_asked_vectors``).
        Compared with user turns embedded as passages, the hybrid's evidence recall on
        LoCoMo dev moved -0.6 to +0.9 points, on BEAM 100K (evidence mostly in user turns)
        -0.3 to +2.9 (docs/archive.md).
        """
        vectors: list[list[float] | None] = [None] * len(texts)
        wanted = [i for i, text in enumerate(texts) if text.strip()]
        if self.embedder is None or not wanted:
            return vectors
        passages = [i for i in wanted if not asked[i]]
        questions = [i for i in wanted if asked[i]]
        if passages:
            embed = getattr(self.embedder, "embed_passages", self.embedder.embed)
            embedded = embed([texts[i] for i in passages])
            _check_embeddings(self.embedder, embedded, len(passages))
            for i, vector in zip(passages, embedded, strict=True):
                vectors[i] = unit(vector)
        if questions:
            asked_vectors = self._asked_vectors([texts[i] for i in questions])  # checked there
            for i, vector in zip(questions, asked_vectors, strict=True):
                vectors[i] = unit(vector)
        return vectors

    def _asked_vectors(self, texts: list[str]) -> list[list[float]]:
        """The query form of ``texts``, each embedded once for its turn and its search (the
        newest ``ASKED`` texts are kept)."""
        assert self.embedder is not None
        with self._asked_lock:
            kept = {text: self._asked[text] for text in texts if text in self._asked}
        new = [text for text in dict.fromkeys(texts) if text not in kept]
        if new:
            embed = getattr(self.embedder, "embed_queries", self.embedder.embed)
            embedded = embed(new)
            _check_embeddings(self.embedder, embedded, len(new))
            kept.update(zip(new, embedded, strict=True))
        with self._asked_lock:
            for text in texts:
                self._asked[text] = kept[text]
                self._asked.move_to_end(text)
            while len(self._asked) > ASKED:
                self._asked.popitem(last=False)
        return [kept[text] for text in texts]

    def _dense(
        self, scope: Scope, query: str, depth: int, before: int | None
    ) -> tuple[list[Ranked], float]:
        """The ``depth`` entries closest in meaning (said before ``before``), best first, and
        the cosine taken as "unrelated" (``dense_floor``): only entries above it are ranked."""
        assert self.embedder is not None
        embedded = self._asked_vectors([query])
        with self._matrices_lock:
            matrix = self._matrix(scope)
            best, floor = matrix.best(unit(embedded[0]), depth, before, self.min_similarity)
        return [Ranked(key, seq, score) for key, seq, score in best], floor

    def _matrix(self, scope: Scope) -> Matrix:
        """The scope's vectors: a session's kept in memory between searches (up to
        ``MATRIX_ROWS`` over all sessions) and brought up to date with the rows added since
        (``_vector_mark``), or read whole when rows went or the backend keeps no mark.

        Keys only grow, so the rows above the highest key a matrix has checked are all it
        lacks, unless rows went, or a row below that key committed after it was checked
        (PostgreSQL's writers of other sessions take keys from the same sequence): then the
        session's row count differs from what the matrix holds, and it is read whole. A row
        another process replaces in place (same entry, other text) keeps its former vector
        here until this process indexes or forgets the session, or the matrix is dropped.
        """
        assert self.embedder is not None
        mark = self._vector_mark(scope.session_id) if scope.user_id is None else None
        if mark is None:
            whole = Matrix(self.embedder.dim)
            whole.add([(key, seq, vector) for key, seq, vector in self._vectors(scope)])
            return whole
        rows, newest = mark
        dim = self.embedder.dim
        kept = self._matrices
        matrix: Matrix | None = kept.pop(scope.session_id) if scope.session_id in kept else None
        if matrix is None or matrix.dim != dim or rows < matrix.rows:
            matrix = Matrix(dim)
        if matrix.rows != rows or matrix.checked < newest:
            matrix.add(self._vectors_after(scope.session_id, matrix.checked), newest)
        if matrix.rows != rows:  # rows went and came, or came meanwhile: read whole
            matrix = Matrix(dim)
            matrix.add(self._vectors_after(scope.session_id, 0), newest)
            if matrix.rows != rows:
                return matrix  # not kept: the next search reads it again
        self._matrices[scope.session_id] = matrix
        while sum(len(m) for m in self._matrices.values()) > MATRIX_ROWS:
            self._matrices.pop(next(iter(self._matrices)))
        return matrix

    def _forget_vectors(self, session_id: str) -> None:
        """The session's rows changed in place or went: its matrix is read again next time."""
        with self._matrices_lock:
            if session_id in self._matrices:
                del self._matrices[session_id]

    # What a backend supplies.

    @abstractmethod
    def _stored(self, session_id: str, entry_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        """For the ids already archived in the session: ``id -> (entry JSON, user_id)``."""

    @abstractmethod
    def _write(
        self, session_id: str, user_id: str | None, documents: list[Document], through: int | None
    ) -> None:
        """Insert or replace the documents (maybe none) and raise the session's watermark to
        ``through`` (unless None or lower), atomically."""

    @abstractmethod
    def _indexed_through(self, session_id: str) -> int:
        """The session's watermark, 0 if it has none."""

    @abstractmethod
    def _lexical(self, scope: Scope, terms: list[str], depth: int, budget: int) -> list[Ranked]:
        """The best ``depth`` rows matching any of ``terms``, best first (ties: seq, key),
        reading at most about ``budget`` postings where the backend can bound its work."""

    @abstractmethod
    def _vectors(self, scope: Scope) -> list[tuple[int, int, StoredVector]]:
        """``(key, seq, vector)`` for every row of the scope that has a vector."""

    def _vector_mark(self, session_id: str) -> tuple[int, int] | None:
        """How many rows the session has and the archive's highest key, read cheaply; None
        (the default) keeps no matrix: every search reads the vectors (``_vectors``)."""
        return None

    def _vectors_after(
        self, session_id: str, key: int
    ) -> list[tuple[int, int, StoredVector | None]]:
        """``(key, seq, vector or None)`` of every row of the session above ``key``, in key
        order (with ``_vector_mark``)."""
        raise NotImplementedError

    @abstractmethod
    def _load(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        """``key -> (session_id, entry JSON)`` for the keys that still exist."""

    @abstractmethod
    def _at(self, session_id: str, seqs: list[int]) -> list[str]:
        """The entry JSON of the session's rows whose seq is in ``seqs`` (sorted, distinct)."""

    @abstractmethod
    def _forget(self, session_id: str) -> int:
        """Remove the session's rows and watermark, atomically; how many rows went."""


def fuse_scores(
    lexical: Sequence[Ranked],
    dense: Sequence[Ranked],
    k: int,
    dense_weight: float,
    min_similarity: float = 0.0,
) -> list[tuple[int, float, int | None, int | None]]:
    """``(key, fused score, lexical rank, dense rank)`` for the best ``k``.

    Each ranking's scores are made shares of its best: a lexical score over
    the best lexical score, a cosine as how far it lies above
    ``min_similarity`` towards the best cosine. The fused score is
    ``(1 - dense_weight) * lexical + dense_weight * dense``, in [0, 1]. Fusing
    scores rather than ranks keeps how much better the best match is than the
    tenth, which recall's neighbour spread and cut-off work on (rank fusion
    measured 4-7 points less evidence recall on LoCoMo at 512 tokens).

    >>> rows = fuse_scores([Ranked(1, 1, 4.0), Ranked(2, 2, 2.0)], [Ranked(2, 2, 0.6)], 2, 0.5)
    >>> [(key, round(score, 2)) for key, score, _, _ in rows]
    [(2, 0.75), (1, 0.5)]
    """
    lexical_rank = {row.key: rank for rank, row in enumerate(lexical, 1)}
    dense_rank = {row.key: rank for rank, row in enumerate(dense, 1)}
    seq = {row.key: row.seq for row in (*lexical, *dense)}
    fused: dict[int, float] = {}
    for rows, weight, floor in (
        (lexical, 1 - dense_weight, 0.0),
        (dense, dense_weight, min_similarity),
    ):
        top = max((row.score for row in rows), default=0.0) - floor
        for row in rows:
            share = (row.score - floor) / top if top > 0 else 1.0
            fused[row.key] = fused.get(row.key, 0.0) + weight * share
    best = sorted(fused, key=lambda key: (-fused[key], seq[key], key))[:k]
    return [(key, fused[key], lexical_rank.get(key), dense_rank.get(key)) for key in best]


def fuse(
    lexical: Sequence[Ranked], dense: Sequence[Ranked], k: int, dense_weight: float, floor: float
) -> list[Fused]:
    """``fuse_scores`` with each row's seq."""
    seq = {row.key: row.seq for row in (*lexical, *dense)}
    return [
        Fused(key, seq[key], score, lexical_rank, dense_rank)
        for key, score, lexical_rank, dense_rank in fuse_scores(
            lexical, dense, k, dense_weight, floor
        )
    ]


# How many entries at or after ``before`` a lexical search asks for beside its depth: the
# question and what came with it in one request (left out afterwards).
LATER = 4


def _said_before(rows: list[Ranked], before: int | None) -> list[Ranked]:
    return rows if before is None else [row for row in rows if row.seq < before]


def _check_seqs(seqs: Iterable[int]) -> None:
    if any(type(seq) is not int or not -(2**63) <= seq < 2**63 for seq in seqs):
        raise ValueError("seqs must be integers that fit in 64 bits")


def _to_json(entry: Entry) -> str:
    try:
        json = entry_to_json(entry)
        json.encode()  # a lone surrogate (from a bad \ud800 escape) cannot be stored
    except (TypeError, ValueError) as exc:
        raise StoreError(f"entry {entry.id!r} cannot be archived as JSON: {exc}") from exc
    return json


def _check_embeddings(embedder: Embedder, vectors: Sequence[Sequence[float]], count: int) -> None:
    if len(vectors) != count or any(len(vector) != embedder.dim for vector in vectors):
        sizes = sorted({len(vector) for vector in vectors})
        raise ValueError(
            f"{type(embedder).__name__} returned {len(vectors)} vectors of sizes {sizes} "
            f"for {count} texts; expected {count} vectors of dim={embedder.dim}"
        )
