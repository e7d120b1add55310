"""PriorityWindow per-turn cost against TokenWindow, side by side in one run.

A turn is one ``add()`` of a never-seen message plus one ``messages()``, with
N = 100, 1,000 and 10,000 messages already added. Contenders, on the same
texts, alternating turn by turn so machine noise hits both alike:

- ``TokenWindow`` (the reference);
- ``PriorityWindow`` with the default rules and no compressor;
- ``PriorityWindow`` as the ``hybrid`` eval strategy builds it (compressor
  chain and rolling summary).

Target: PriorityWindow's per-turn time within 2x of TokenWindow's. Run with
``make bench``. Nothing here asserts a time.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_windows import BUDGET, MODEL, SEED, SYSTEM, TextSource
from ctxwindow import PriorityWindow, TokenWindow
from ctxwindow.compress import Chain, Extractive, RollingSummary, Structured, Truncate
from ctxwindow.policies import Folding, Window
from ctxwindow.tokens import chat_tokenizer

TURNS = 300
TARGET = 2.0


def hybrid() -> Window:
    tok = chat_tokenizer(MODEL)
    return PriorityWindow(
        BUDGET,
        MODEL,
        system=SYSTEM,
        oversize="drop",
        folding=Folding(
            compressor=Chain(Structured(tok), Extractive(tok), Truncate(tok)),
            compress_threshold=2000,
            summarizer=RollingSummary(Extractive(tok), tok).fold,
            summary_tokens=800,
        ),
    )


CONTENDERS: dict[str, Callable[[], Window]] = {
    "TokenWindow": lambda: TokenWindow(BUDGET, MODEL, system=SYSTEM),
    "PriorityWindow": lambda: PriorityWindow(BUDGET, MODEL, system=SYSTEM),
    "PriorityWindow (hybrid)": hybrid,
}


def main() -> None:
    source = TextSource(SEED)
    print(f"PriorityWindow vs TokenWindow, budget {BUDGET:,} tokens, {TURNS} turns per N")
    print(f"{'N':>8}  {'contender':<26}{'median':>10}{'p90':>10}{'mean':>10}{'x TokenWindow':>15}")
    worst = 0.0
    for n in (100, 1_000, 10_000):
        prefill = source.take(n)
        turns = source.take(TURNS, first_role=n % 2)
        windows = {name: make() for name, make in CONTENDERS.items()}
        for window in windows.values():
            for role, text in prefill:
                window.add(role, text)
        times: dict[str, list[int]] = {name: [] for name in windows}
        gc.collect()
        names = list(windows)
        for i, (role, text) in enumerate(turns):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                window = windows[name]
                t0 = time.perf_counter_ns()
                window.add(role, text)
                window.messages()
                times[name].append(time.perf_counter_ns() - t0)
        base = statistics.median(times["TokenWindow"])
        for name, values in times.items():
            median = statistics.median(values)
            p90 = statistics.quantiles(values, n=10)[-1]
            ratio = median / base
            if name != "TokenWindow":
                worst = max(worst, ratio)
            mean = statistics.fmean(values)
            print(
                f"{n:>8,}  {name:<26}{median / 1000:>8.1f}µs{p90 / 1000:>8.1f}µs"
                f"{mean / 1000:>8.1f}µs{ratio:>14.2f}x"
            )
    verdict = "PASS" if worst <= TARGET else "MISS"
    print(f"{verdict}  worst PriorityWindow / TokenWindow: {worst:.2f}x (target <= {TARGET}x)")
    print(
        "note  the ratio is of medians; the hybrid's p90 and mean include the turns that\n"
        "      fold a batch of evictions into the rolling summary (extractive, no model)"
    )


if __name__ == "__main__":
    main()
