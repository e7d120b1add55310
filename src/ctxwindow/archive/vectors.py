"""Vectors beside the entries: float32 packing and brute-force cosine ranking.

Ranking is exact and linear: every stored vector of the searched sessions is
compared with the query. For 10,000 vectors of 384 dimensions that takes
about 25 ms with numpy (float32 BLOBs; 75 ms from PostgreSQL's float lists)
and 0.25 s in pure Python when numpy is missing, plus reading the 15 MB of
vectors from the database.
"""

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


def similarities(query: Vector, stored: Sequence[StoredVector]) -> list[float]:
    """The dot product of ``query`` with each stored vector (cosine for unit vectors).

    A stored vector whose size differs from the query's (written by another
    embedder) gets ``-inf``: it never ranks.
    """
    scores = [float("-inf")] * len(stored)
    fitting = [i for i, vector in enumerate(stored) if _size(vector) == len(query)]
    if not fitting:
        return scores
    try:
        numpy: Any = importlib.import_module("numpy")
    except ImportError:
        products = [_dot(query, _as_floats(stored[i])) for i in fitting]
    else:
        products = _products_numpy(numpy, query, [stored[i] for i in fitting])
    for i, product in zip(fitting, products, strict=True):
        scores[i] = product
    return scores


def _products_numpy(numpy: Any, query: Vector, stored: list[StoredVector]) -> list[float]:
    if all(isinstance(vector, bytes) for vector in stored):
        blob = b"".join(vector for vector in stored if isinstance(vector, bytes))
        matrix = numpy.frombuffer(blob, dtype="<f4").reshape(len(stored), len(query))
    else:
        matrix = numpy.asarray([_as_floats(vector) for vector in stored], dtype=numpy.float32)
    products: list[float] = (matrix @ numpy.asarray(query, dtype=numpy.float32)).tolist()
    return products


def _size(vector: StoredVector) -> int:
    return len(vector) // 4 if isinstance(vector, bytes) else len(vector)


def _as_floats(vector: StoredVector) -> Sequence[float]:
    return unpack(vector) if isinstance(vector, bytes) else vector


def _dot(a: Vector, b: Vector) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))
