"""How the report writes numbers: budgets, token counts, percents, dollars, milliseconds."""

from __future__ import annotations

import math
from collections.abc import Iterable


def budget_label(tokens: int) -> str:
    """A short budget label: 1024 → ``1k``, 131072 → ``128k``, 3000 → ``3k``."""
    for size, unit in ((1 << 20, "M"), (1 << 10, "k"), (10**6, "M"), (10**3, "k")):
        if tokens >= size and tokens % size == 0:
            return f"{tokens // size}{unit}"
    return f"{tokens:,}"


def budget_labels(budgets: Iterable[int]) -> dict[int, str]:
    """Short labels for several budgets, written in full where two would read the same.

    >>> budget_labels([1000, 1024, 4096])
    {1000: '1,000', 1024: '1,024', 4096: '4k'}
    """
    short = {budget: budget_label(budget) for budget in sorted(set(budgets))}
    shared = {label for label in short.values() if list(short.values()).count(label) > 1}
    return {b: f"{b:,}" if label in shared else label for b, label in short.items()}


def tokens_label(tokens: float) -> str:
    """A short token count: 23412.5 → ``23.4k``, 812 → ``812``."""
    if tokens >= 10**6:
        return f"{tokens / 10**6:.1f}M"
    if tokens >= 10**3:
        return f"{tokens / 10**3:.1f}k"
    return f"{tokens:.0f}"


def percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def count(value: float) -> str:
    return f"{value:,.0f}"


def usd(value: float) -> str:
    """Dollars with three significant digits below $1: ``$0.00250``, ``$0.110``, ``$12.40``."""
    if value == 0 or abs(value) >= 1:
        return f"${value:,.2f}"
    decimals = 2 - math.floor(math.log10(abs(value)))
    return f"${value:.{max(decimals, 2)}f}"


def ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:,.1f}"


def score(value: float) -> str:
    return f"{value:.2f}"
