"""Evidence recall of the hybrid against the strongest simple baselines, side by side.

On each dataset of ``DATASETS`` (a spec and its budgets: LoCoMo's dev file at
512-8,192 tokens, ``builtin:all`` at 1,024-16,384), ``ctxwindow eval``'s
runner measures ``hybrid``, ``hybrid_nocache``, ``hybrid_words``, ``token_window`` and every
strategy whose ``baseline`` is set (``bm25`` and those of
``ctxwindow.eval.baselines``: BM25, dense and RRF fill, with neighbours, and
half newest + RRF; the dense ones when the ``dense`` extra is installed).
It prints evidence recall by budget, the best baseline at each budget (its
value and name) and ``hybrid − best baseline`` for each hybrid, whether each
hybrid is monotone in budget (no budget more than 0.5 points below the one
before), the hybrids' ``recent_recall`` (the share of the 4 newest messages
before the question present) and ``evidence_recall_whole`` (compressed
evidence not credited), then the tables by category, and the wall times: the
hybrid alone at its five budgets, the other two, the lexical baselines and
the dense ones (model loading and embedding included, each text once per
worker process; vectors are read from ``ctxwindow eval``'s embedding cache
when an earlier run kept them, and the script says where that is).

LoCoMo is read from the first argument, else ``$CTXWINDOW_LOCOMO``, else
``../shared/data/locomo-dev.json`` beside the repository (its licence, CC
BY-NC, keeps it out of the repository). BEAM (2,048-32,768 tokens) is measured
when ``$CTXWINDOW_BEAM`` names a tier folder of a BEAM checkout
(``chats/100K``; it has no licence, so it is never copied here). Run with
``make bench``. Nothing here asserts a number.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from ctxwindow.eval import get_strategy, load_dataset, run_eval, strategy_names
from ctxwindow.eval.dataset import Dataset
from ctxwindow.eval.vector_cache import cache_path
from ctxwindow.extras import require

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
LOCOMO_BUDGETS = [512, 1024, 2048, 4096, 8192]
BUILTIN_BUDGETS = [1024, 2048, 4096, 8192, 16384]
BEAM_BUDGETS = [2048, 4096, 8192, 16384, 32768]
HYBRIDS = ["hybrid", "hybrid_nocache", "hybrid_words"]
WINDOW = "token_window"
WORKERS = os.cpu_count() or 1
COLUMN = 14  # wide enough for a baseline's name
TARGET_P99_MS = 2.0  # the hybrid's build with recall (by words), p99
LABEL = 34


def datasets(locomo: Path, beam: str | None) -> list[tuple[str, list[int]]]:
    """What is measured: each dataset's spec and budgets (add one here to measure it)."""
    found: list[tuple[str, list[int]]] = []
    if locomo.exists():
        found.append((f"locomo:{locomo}", LOCOMO_BUDGETS))
    else:
        print(f"{locomo} not found: LoCoMo not measured (see shared/data/README.md)")
    if beam:
        found.append((f"beam:{beam}", BEAM_BUDGETS))
    else:
        print("BEAM not measured: set CTXWINDOW_BEAM to a BEAM checkout's chats/100K folder")
    found.append(("builtin:all", BUILTIN_BUDGETS))
    return found


def baselines() -> tuple[list[str], list[str]]:
    """The baselines that can run here, lexical then dense; says which cannot, and why."""
    lexical, dense = [], []
    for name in strategy_names():
        strategy = get_strategy(name)
        if not strategy.baseline:
            continue
        if strategy.extra is None:
            lexical.append(name)
            continue
        try:
            require(strategy.extra, f"the baseline {name!r}")  # looked up: nothing is loaded
        except ImportError as exc:
            print(f"{exc}: not measured")
            continue
        dense.append(name)
    return lexical, dense


def timed(dataset: Dataset, names: list[str], budgets: list[int]) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    results = run_eval(dataset, strategies=names, budgets=budgets, workers=WORKERS)["results"]
    return results, time.perf_counter() - start


def measure(spec: str, budgets: list[int], lexical: list[str], dense: list[str]) -> None:
    dataset, _ = load_dataset(spec)
    print(
        f"\n{dataset.name}: {len(dataset.conversations)} conversations, "
        f"{dataset.n_questions} questions, {len(budgets)} budgets, {WORKERS} workers"
    )
    results: dict[str, Any] = {}
    groups = [
        ("hybrid alone", ["hybrid"]),
        ("hybrid_nocache, hybrid_words, token_window", ["hybrid_nocache", "hybrid_words", WINDOW]),
        ("lexical baselines", lexical),
        ("dense baselines", dense),
    ]
    for label, names in groups:
        if names:
            found, wall = timed(dataset, names, budgets)
            results.update(found)
            print(f"  wall: {label} ({', '.join(names)}) {wall:.1f} s")
    compared = [*lexical, *dense]
    order = [WINDOW, *HYBRIDS, *compared]
    print_table("evidence recall (%)", results, order, budgets)
    print_best(results, compared, budgets)
    print_monotone(results, HYBRIDS, budgets)
    print_table("recent_recall (%)", results, HYBRIDS, budgets, "recent_recall")
    print_table("evidence_recall_whole (%)", results, HYBRIDS, budgets, "evidence_recall_whole")
    print_builds(results, budgets)
    categories = sorted(next(iter(results["hybrid"].values()))["by_category"])
    for category in categories:
        by = {
            name: {
                label: row["by_category"].get(category, {"evidence_recall": 0.0, "n": 0})
                for label, row in rows.items()
            }
            for name, rows in results.items()
        }
        n = by["hybrid"][str(budgets[0])]["n"]
        print_table(f"{category} ({n})", by, order, budgets)
        print_best(by, compared, budgets)


def recall(
    results: dict[str, Any], name: str, budget: int, metric: str = "evidence_recall"
) -> float:
    return 100 * float(results[name][str(budget)][metric])


def print_table(
    title: str,
    results: dict[str, Any],
    order: list[str],
    budgets: list[int],
    metric: str = "evidence_recall",
) -> None:
    print(f"  {title:<{LABEL}}" + "".join(f"{b:>{COLUMN}}" for b in budgets))
    for name in order:
        cells = "".join(f"{recall(results, name, b, metric):>{COLUMN}.1f}" for b in budgets)
        print(f"    {name:<{LABEL - 2}}{cells}")


def print_builds(results: dict[str, Any], budgets: list[int]) -> None:
    """Each hybrid's build (recall included) p50 and p99, ms, as the runner timed it; the
    target on ``hybrid_words``, since ``hybrid``'s builds embed the question as well."""
    for percentile in ("p50", "p99"):
        print(
            f"  {f'build {percentile} (ms)':<{LABEL}}" + "".join(f"{b:>{COLUMN}}" for b in budgets)
        )
        for name in HYBRIDS:
            times = [float(results[name][str(b)][f"build_ms_{percentile}"]) for b in budgets]
            print(f"    {name:<{LABEL - 2}}" + "".join(f"{t:>{COLUMN}.2f}" for t in times))
    worst = max(float(results["hybrid_words"][str(b)]["build_ms_p99"]) for b in budgets)
    verdict = "PASS" if worst <= TARGET_P99_MS else "MISS"
    print(f"  {verdict}  hybrid_words build p99, worst budget: {worst:.2f} ms (target <= 2 ms)")


def print_monotone(results: dict[str, Any], names: list[str], budgets: list[int]) -> None:
    """Whether each budget keeps at least the previous one's evidence recall, less 0.5 points."""
    for name in names:
        values = [recall(results, name, b) for b in budgets]
        pairs = zip(budgets[1:], values[:-1], values[1:], strict=True)
        drops = [f"{b:,}" for b, before, now in pairs if now < before - 0.5]
        verdict = f"drops at {', '.join(drops)}" if drops else "yes"
        print(f"    {f'{name} monotone (-0.5)':<{LABEL - 2}}{verdict:>{COLUMN}}")


def print_best(results: dict[str, Any], compared: list[str], budgets: list[int]) -> None:
    """The best baseline at each budget (value, then name), and each hybrid's margin over it."""
    if not compared:
        return
    best = [max(compared, key=lambda name: recall(results, name, b)) for b in budgets]
    values = [recall(results, name, b) for name, b in zip(best, budgets, strict=True)]
    print(f"    {'best baseline':<{LABEL - 2}}" + "".join(f"{v:>{COLUMN}.1f}" for v in values))
    print(f"    {'':<{LABEL - 2}}" + "".join(f"{name:>{COLUMN}}" for name in best))
    for hybrid in HYBRIDS:
        margins = [recall(results, hybrid, b) - v for b, v in zip(budgets, values, strict=True)]
        label = f"{hybrid} − best baseline"
        print(f"    {label:<{LABEL - 2}}" + "".join(f"{m:>+{COLUMN}.1f}" for m in margins))


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # progress as it comes
    given = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTXWINDOW_LOCOMO")
    lexical, dense = baselines()
    kept = cache_path()
    print(
        f"vectors kept in {kept}: wall times after a first run are without embedding"
        if kept
        else "no embedding cache ($CTXWINDOW_EMBEDDING_CACHE=off): every text is embedded"
    )
    beam = os.environ.get("CTXWINDOW_BEAM")
    for spec, budgets in datasets(Path(given) if given else LOCOMO, beam):
        measure(spec, budgets, lexical, dense)


if __name__ == "__main__":
    main()
