"""Reading a results document: its runs (strategy × budget) in report order, and their colors.

Shared by the charts and the HTML page, so both show the same runs in the
same order and each strategy in the same color.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

UNBOUNDED = "unbounded"

# Matplotlib's tab10: one color per strategy, the same in every chart and table.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One strategy at one budget (``budget`` is None for an unbounded strategy)."""

    strategy: str
    budget: int | None
    metrics: Mapping[str, Any]

    @property
    def budget_key(self) -> str:
        return UNBOUNDED if self.budget is None else str(self.budget)

    @property
    def recall(self) -> float:
        return float(self.metrics["evidence_recall"])

    @property
    def tokens(self) -> float:
        return float(self.metrics["mean_tokens"])


def strategy_order(results: Mapping[str, Any]) -> list[str]:
    """Strategy names in the declared order, then any others the results hold."""
    runs = results.get("results", {})
    declared = [name for name in results.get("strategies", []) if name in runs]
    return declared + [name for name in runs if name not in declared]


def _budget_of(key: str) -> int | None:
    return None if key == UNBOUNDED else int(key)


def budget_order(key: str) -> tuple[bool, int]:
    """Sort key of budget keys: ascending, ``"unbounded"`` last."""
    budget = _budget_of(key)
    return budget is None, budget or 0


def read_runs(results: Mapping[str, Any]) -> list[Run]:
    """Every strategy × budget: strategies in order, budgets ascending, unbounded last."""
    runs = []
    for strategy in strategy_order(results):
        by_budget = results["results"][strategy]
        for key in sorted(by_budget, key=budget_order):
            runs.append(Run(strategy, _budget_of(key), by_budget[key]))
    return runs


def by_strategy(runs: Sequence[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.strategy, []).append(run)
    return groups


def strategy_colors(results: Mapping[str, Any]) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(strategy_order(results))}


def subject(results: Mapping[str, Any]) -> str:
    """``"gpt-4o · builtin:all"``: what was evaluated, for titles."""
    parts = [str(results[key]) for key in ("model", "dataset") if results.get(key)]
    return " · ".join(parts)


def category_counts(runs: Sequence[Run]) -> dict[str, int | None]:
    """Category names in first-seen order, each with its question count if runs agree."""
    counts: dict[str, set[int | None]] = {}
    for run in runs:
        for name, metrics in run.metrics.get("by_category", {}).items():
            counts.setdefault(name, set()).add(metrics.get("n"))
    return {name: n.pop() if len(n) == 1 else None for name, n in counts.items()}
