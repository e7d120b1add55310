"""Vectors beside the entries: float32 packing and brute-force cosine ranking.

Ranking is exact and linear: every stored vector of the searched session is
compared with the query. Reading them from the database at every search cost
~55 ms for 20,000 vectors of 384 dimensions on SQLite, and ranking them in
Python as much again; so an archive keeps each session's vectors in memory
(``Matrix``: one float32 array, one product per search, ~2 ms for 20,000),
reading only the rows added since its last search (``Archive._matrix``).
Without numpy the product is pure Python (~0.25 s for 10,000)."""

from __future__ import annotations

import importlib
import math
import statistics
import sys
from array import array
from collections.abc import Sequence
from typing import Any

Vector = Sequence[float]
StoredVector = bytes | Sequence[float]
"""A packed float32 blob (SQLite) or a float array (PostgreSQL ``real[]``)."""


def unit(vector: Vector) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays zero)."""
    norm = sum(x * x for x in vector) ** 0.5
    return [x / norm for x in vector] if norm else [0.0 for _ in vector]


# Fewer cosines than this say little of what "unrelated" scores: dense_floor keeps min_similarity.
FLOOR_SAMPLE = 16


def dense_floor(scores: Sequence[float], min_similarity: float) -> float:
    """The cosine below which a match means nothing, for one query: the larger of
    ``min_similarity`` and the median of its cosines over the searched entries
    (when there are at least ``FLOOR_SAMPLE`` of them).

    Most entries of a conversation are unrelated to any one question, so the
    median is what "unrelated" scores with this model. Models differ a lot
    there (all-MiniLM-L6-v2 about 0.1, multilingual-e5 about 0.8), so a fixed
    threshold suits one model and flattens the other; the median follows the
    model and the conversation, with no constant to tune.

    >>> dense_floor([0.1] * 8 + [0.2] * 8 + [0.9], 0.0), dense_floor([0.1, 0.2, 0.9], 0.0)
    (0.2, 0.0)
    """
    finite = [score for score in scores if math.isfinite(score)]
    if len(finite) < FLOOR_SAMPLE:
        return min_similarity
    return max(min_similarity, statistics.median(finite))


def pack(vector: Vector) -> bytes:
    """Little-endian float32, 4 bytes per dimension."""
    packed = array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack(blob: bytes) -> array[float]:
    unpacked = array("f")
    unpacked.frombytes(blob)
    if sys.byteorder == "big":
        unpacked.byteswap()
    return unpacked


def _size(vector: StoredVector) -> int:
    return len(vector) // 4 if isinstance(vector, bytes) else len(vector)


def _as_floats(vector: StoredVector) -> Sequence[float]:
    return unpack(vector) if isinstance(vector, bytes) else vector


def _dot(a: Vector, b: Vector) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class Matrix:
    """A session's vectors in memory, appended to as the archive grows: a search scores
    them in one product, instead of reading every vector from the database again.

    With numpy (the packaged embedder's one dependency) the vectors are one float32
    array, grown by doubling; without it, lists (the pure-Python product). Vectors of
    another size than ``dim`` (written by another embedder) are left out: they never rank.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.rows = 0  # every row added, with or without a vector (the backend's count)
        self.checked = 0  # every row of the session up to this key is in
        self.keys: list[int] = []
        self.seqs: list[int] = []
        self._numpy: Any = numpy_or_none()
        self._vectors: Any = (
            self._numpy.zeros((0, dim), dtype=self._numpy.float32) if self._numpy else []
        )

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, rows: Sequence[tuple[int, int, StoredVector | None]], checked: int = 0) -> None:
        """Rows ``(key, seq, vector or None)``, in key order: every row of the session up to
        ``checked`` and the highest key among them, now."""
        self.rows += len(rows)
        self.checked = max([self.checked, checked, *(key for key, _, _ in rows)])
        fitting = [row for row in rows if row[2] is not None and _size(row[2]) == self.dim]
        if not fitting:
            return
        self.keys += [key for key, _, _ in fitting]
        self.seqs += [seq for _, seq, _ in fitting]
        vectors = [vector for _, _, vector in fitting if vector is not None]
        if self._numpy is None:
            self._vectors += [_as_floats(vector) for vector in vectors]
            return
        numpy, used = self._numpy, len(self.keys) - len(fitting)
        if len(self.keys) > len(self._vectors):
            grown = numpy.zeros((max(2 * len(self._vectors), len(self.keys)), self.dim), "<f4")
            grown[:used] = self._vectors[:used]
            self._vectors = grown
        self._vectors[used : len(self.keys)] = _rows(numpy, vectors, self.dim)

    def best(
        self, query: Vector, depth: int, before: int | None, min_similarity: float
    ) -> tuple[list[tuple[int, int, float]], float]:
        """``(key, seq, cosine)`` of the ``depth`` closest rows (said before ``before``),
        best first (ties: seq, key), above the floor (``dense_floor``); and the floor."""
        if len(query) != self.dim or not self.keys:
            return [], min_similarity
        if self._numpy is None:
            chosen = [i for i, seq in enumerate(self.seqs) if before is None or seq < before]
            scores = [_dot(query, self._vectors[i]) for i in chosen]
            floor = dense_floor(scores, min_similarity)
            ranked = [
                (self.keys[i], self.seqs[i], score)
                for i, score in zip(chosen, scores, strict=True)
                if score >= floor
            ]
            ranked.sort(key=lambda row: (-row[2], row[1], row[0]))
            return ranked[:depth], floor
        numpy = self._numpy
        # einsum, not ``@``: numpy's own loop on this thread. ``@`` is BLAS, whose threads
        # spin for a while after each product: in ``ctxwindow serve`` at 2,000 vectors that
        # cost ~100 ms of CPU a request, for a product of 0.05 ms (and one thread's einsum
        # is as fast as BLAS's one thread, faster at 20,000 vectors: 1.7 ms, not 2.4).
        products = numpy.einsum(
            "ij,j->i", self._vectors[: len(self.keys)], numpy.asarray(query, dtype=numpy.float32)
        )
        seqs = numpy.asarray(self.seqs)
        chosen = numpy.flatnonzero(seqs < before) if before is not None else numpy.arange(len(seqs))
        scores = products[chosen].astype(numpy.float64)
        finite = scores[numpy.isfinite(scores)]
        floor = min_similarity
        if len(finite) >= FLOOR_SAMPLE:
            floor = max(min_similarity, float(numpy.median(finite)))
        above = chosen[scores >= floor]
        if len(above) > depth:  # the depth best, and every row tied with the last of them
            cut = numpy.partition(products[above], len(above) - depth)[len(above) - depth]
            above = above[products[above] >= cut]
        ranked = [(self.keys[i], self.seqs[i], float(products[i])) for i in above.tolist()]
        ranked.sort(key=lambda row: (-row[2], row[1], row[0]))
        return ranked[:depth], floor


def numpy_or_none() -> Any:
    """numpy, or None where it is not installed (a matrix then ranks in pure Python, a
    ``lexicon.Lexicon`` is not kept)."""
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None


def _rows(numpy: Any, vectors: list[StoredVector], dim: int) -> Any:
    if all(isinstance(vector, bytes) for vector in vectors):
        blob = b"".join(vector for vector in vectors if isinstance(vector, bytes))
        return numpy.frombuffer(blob, dtype="<f4").reshape(len(vectors), dim)
    return numpy.asarray([_as_floats(vector) for vector in vectors], dtype=numpy.float32)
