"""Reciprocal-rank fusion: one ranking from several, by rank alone."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60
"""The constant of Cormack et al. (2009): it damps the weight of the very first ranks."""


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], k: int = RRF_K, weights: Sequence[float] | None = None
) -> dict[K, float]:
    """``item -> sum of weight / (k + rank)`` over the rankings that rank it (rank 1 = best).

    Scores from different rankers (BM25, cosine) are not comparable; ranks
    are, so fusion needs no tuning. ``weights`` (one per ranking, default 1)
    lean the result towards the rankers you trust more.

    >>> reciprocal_rank_fusion([["a", "b"], ["b", "c"]])["b"] == 1 / 62 + 1 / 61
    True
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    elif len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    fused: dict[K, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused
