"""The metrics of one strategy at one budget, from its measured contexts.

The recall metrics, overall and by category: ``evidence_recall`` (the share
of questions whose evidence is all present, whole or compressed with the
answer), ``evidence_recall_whole`` (crediting no compressed form),
``turn_recall`` (the mean share of evidence present) and ``answer_score``
(with an answerer). Then the tokens and their cost, the build time's
percentiles, how often the budget was exceeded, ``recent_recall`` (the mean
share of the newest ``RECENT`` history messages kept) and the outcome letter
of every question, in order (``OUTCOMES``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ctxwindow.eval.scoring import KEPT, Measurement


def summarize(measured: Sequence[Measurement], budget: int | None, price: float) -> dict[str, Any]:
    """The metrics of one strategy at one budget."""
    tokens = [m.tokens for m in measured]
    times = sorted(m.build_ms for m in measured)
    summary: dict[str, Any] = {
        **_recall(measured),
        "mean_tokens": round(_mean(tokens), 2),
        "mean_cost_usd": round(_mean(tokens) * price / 1e6, 8),
        "total_cost_usd": round(sum(tokens) * price / 1e6, 8),
        "build_ms_p50": round(percentile(times, 50), 4),
        "build_ms_p99": round(percentile(times, 99), 4),
        "over_budget_rate": _over_budget(tokens, budget),
        **_recent(measured),
        "by_category": _by_category(measured),
        "outcomes": "".join(m.outcome for m in measured),
    }
    return summary


def _recall(measured: Sequence[Measurement]) -> dict[str, Any]:
    scores = [m.score for m in measured if m.score is not None]
    return {
        "evidence_recall": round(_mean([m.all_evidence for m in measured]), 6),
        "evidence_recall_whole": round(_mean([m.outcome == KEPT for m in measured]), 6),
        "turn_recall": round(_mean([m.evidence_share for m in measured]), 6),
        "n": len(measured),
        "answer_score": round(_mean(scores), 6) if scores else None,
    }


def _recent(measured: Sequence[Measurement]) -> dict[str, float]:
    """``recent_recall``: the mean share of the newest messages kept; ``recent_all``: the
    share of contexts that kept them all."""
    return {
        "recent_recall": round(_mean([m.recent_share for m in measured]), 6),
        "recent_all": round(_mean([m.recent_share == 1.0 for m in measured]), 6),
    }


def _by_category(measured: Sequence[Measurement]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Measurement]] = defaultdict(list)
    for m in measured:
        groups[m.category].append(m)
    return {category: _recall(groups[category]) for category in sorted(groups)}


def _over_budget(tokens: Sequence[int], budget: int | None) -> float:
    if budget is None:
        return 0.0
    return round(_mean([t > budget for t in tokens]), 6)


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (numpy's default method)."""
    if not sorted_values:
        return 0.0
    rank = (len(sorted_values) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)
