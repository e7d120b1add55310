"""What a provider's prompt cache saves, turn by turn: the cache-aware hybrid against the
sliding token window and the hybrid without the cache mode (docs/caching.md).

A script, not a test: it prints what it measured and the ratios side by side in one run;
nothing fails on a figure. Offline, deterministic (no timing is involved).

Every user turn of the built-in datasets (and of LoCoMo with ``--locomo PATH``) is replayed
as an app would send it (``ctxwindow eval --replay``): the context is built, compared with
the previous turn's, and the tokens OpenAI would serve from its cache (the shared prefix,
from 1,024 tokens, in steps of 128) are priced at gpt-4.1's cached-input price ($0.50 per
1M, against $2.00). Evidence recall is measured on the questions, on the replayed state.

    python benchmarks/bench_cache.py [--budgets 4096,8192] [--locomo PATH]
"""

from __future__ import annotations

import argparse
import platform
from typing import Any

from rich.console import Console

import ctxwindow
from ctxwindow.eval.command import load_all, merge
from ctxwindow.eval.runner import run_eval

STRATEGIES = ["token_window", "hybrid_nocache", "hybrid"]


def measure(dataset: str, budgets: list[int], model: str) -> dict[str, Any]:
    loaded = merge(load_all([dataset], False, Console(stderr=True)))
    return run_eval(
        loaded, strategies=STRATEGIES, budgets=budgets, model=model, replay=True, workers=2
    )


def report(name: str, results: dict[str, Any]) -> None:
    runs = results["results"]
    print(f"\n{name}: {results['n_conversations']} conversations, "
          f"{results['n_questions']} questions, model {results['model']}")  # fmt: skip
    print(f"{'budget':>7} {'strategy':<15} {'recall':>7} {'cached':>7} {'$/turn':>10}")
    for budget in map(str, results["budgets"]):
        for strategy in STRATEGIES:
            m = runs[strategy][budget]
            replay = m["replay"]
            print(
                f"{budget:>7} {strategy:<15} {m['evidence_recall']:>7.1%} "
                f"{replay['cached_share']:>7.0%} {replay['input_usd_per_turn']:>10.5f}"
            )
        ours = runs["hybrid"][budget]
        cost = ours["replay"]["input_usd_per_turn"]
        for other in ("token_window", "hybrid_nocache"):
            theirs = runs[other][budget]
            ratio = theirs["replay"]["input_usd_per_turn"] / cost
            delta = (ours["evidence_recall"] - theirs["evidence_recall"]) * 100
            print(f"{'':>7} hybrid vs {other}: {ratio:.2f}x cheaper a turn, "
                  f"recall {delta:+.1f} points")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="4096,8192")
    parser.add_argument("--model", default="gpt-4.1")
    parser.add_argument("--locomo", help="locomo10.json (or its dev part) to measure too")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    print(f"ctxwindow {ctxwindow.__version__}, Python {platform.python_version()}")
    report("builtin:all", measure("builtin:all", budgets, args.model))
    if args.locomo:
        report("LoCoMo", measure(f"locomo:{args.locomo}", budgets, args.model))


if __name__ == "__main__":
    main()
