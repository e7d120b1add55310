"""Fact retention of the rolling summary, and the time per fold.

The hybrid window without recall (``hybrid_policy()(budget,
chat_tokenizer("gpt-4o"))``, what the ``hybrid_norecall`` eval strategy
builds) ingests each conversation once per budget. When the point of a
question is reached (its ``after`` message, else the end), the question is
*folded* if every one of its evidence turns is in the summary's
``summarized_ids``: evicted, and folded into the summary. It is *retained*
if its answer, normalized with ``ctxwindow.eval.llm.normalize``, is in the
summary text normalized the same way. Fact retention = retained / folded.

Every call of the window's summarizer is timed (``time.perf_counter``): the
mean is the time per fold, with the compressors' memo caches emptied before
each dataset and budget (the first fold of a text pays for reading it).
``marker lines`` counts lines of the summaries read at question time that
hold nothing but a cut marker (``[… N chars (M tokens) cut by ctxwindow …]``,
``…``).

Data: the built-in datasets, and ``../shared/data/locomo-dev.json`` (relative
to the repository; CC BY-NC, read in place, never copied) when it exists,
through ``load_dataset("locomo:PATH")`` (categories 1-4; see docs/eval.md).
Nothing here asserts a number.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwindow.context import hybrid_policy
from ctxwindow.eval.dataset import Conversation, Dataset
from ctxwindow.eval.llm import normalize
from ctxwindow.eval.loaders import load_dataset
from ctxwindow.messages import Entry
from ctxwindow.policies import Window
from ctxwindow.tokens import chat_tokenizer

BUDGETS = (1024, 2048, 4096, 8192)
MODEL = "gpt-4o"
LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo-dev.json"
ONLY_MARKER = re.compile(r"\W*(?:\[… \d+ chars \(\d+ tokens\) cut by ctxwindow …\]\W*)*")


@dataclass
class Tally:
    folded: int = 0
    retained: int = 0
    folds: int = 0
    fold_seconds: float = 0.0
    marker_lines: int = 0

    def add(self, other: Tally) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def timed(summarizer: Callable[..., Entry], tally: Tally) -> Callable[..., Entry]:
    def fold(*args: Any) -> Entry:
        start = time.perf_counter()
        try:
            return summarizer(*args)
        finally:
            tally.fold_seconds += time.perf_counter() - start
            tally.folds += 1

    return fold


def summary_of(window: Window) -> Entry | None:
    return next((e for e in window.entries() if e.kind == "summary"), None)


def run(conversation: Conversation, budget: int) -> Tally:
    """Ingest ``conversation`` once; judge each question when its point is reached."""
    tally = Tally()
    window = hybrid_policy()(budget, chat_tokenizer(MODEL))
    window.summarizer = timed(window.summarizer, tally)  # type: ignore[attr-defined]
    asked_at: dict[int, list[Any]] = {}
    for question in conversation.questions:
        end = len(conversation.messages)
        if question.after is not None:
            end = conversation.message_ids.index(question.after) + 1
        asked_at.setdefault(end, []).append(question)
    dataset_ids: dict[str, str] = {}
    for n, (mid, message) in enumerate(
        zip(conversation.message_ids, conversation.messages, strict=True), 1
    ):
        entry = window.add(message, metadata={"id": mid})
        if entry is not None:
            dataset_ids[entry.id] = mid
        for question in asked_at.get(n, ()):
            judge(question, summary_of(window), dataset_ids, tally)
    return tally


def judge(question: Any, summary: Entry | None, ids: dict[str, str], tally: Tally) -> None:
    if summary is None:
        return
    folded = {ids[i] for i in summary.metadata.get("summarized_ids", ()) if i in ids}
    if not set(question.evidence) <= folded:
        return
    text = str(summary.message["content"])
    tally.folded += 1
    tally.retained += normalize(str(question.answer)) in normalize(text)
    tally.marker_lines += sum(1 for line in text.splitlines() if ONLY_MARKER.fullmatch(line))


def cold_caches() -> None:
    """Empty the compressors' memo caches, so no budget runs on what the last one learnt."""
    for name, module in list(sys.modules.items()):
        if name.startswith("ctxwindow.compress"):
            for value in vars(module).values():
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def measure(dataset: Dataset) -> Iterator[tuple[int, int, Tally]]:
    for budget in BUDGETS:
        cold_caches()
        total = Tally()
        for conversation in dataset.conversations:
            total.add(run(conversation, budget))
        yield budget, dataset.n_questions, total


def report(name: str, rows: Iterator[tuple[int, int, Tally]]) -> None:
    for budget, questions, t in rows:
        share = f"{100 * t.retained / t.folded:6.1f}%" if t.folded else "      -"
        mean = f"{1000 * t.fold_seconds / t.folds:7.2f}" if t.folds else "      -"
        print(
            f"{name:<20} {budget:>6} {questions:>9} {t.folded:>7} {t.retained:>8} {share:>9} "
            f"{t.folds:>6} {mean:>8} {t.marker_lines:>12}",
            flush=True,
        )


def main() -> None:
    print(f"Rolling summary fact retention, hybrid window without recall, {MODEL}")
    print(
        f"{'dataset':<20} {'budget':>6} {'questions':>9} {'folded':>7} {'retained':>8} "
        f"{'retention':>9} {'folds':>6} {'ms/fold':>8} {'marker lines':>12}"
    )
    report("builtin:all", measure(load_dataset("builtin:all")[0]))
    if LOCOMO.exists():
        report("locomo-dev", measure(load_dataset(f"locomo:{LOCOMO}")[0]))
    else:
        print(f"{LOCOMO} not found: LoCoMo skipped")
    print(
        "folded = questions whose evidence turns were all folded into the summary when asked;"
        "\nretained = of those, the answer (normalized) is in the summary text"
    )


if __name__ == "__main__":
    sys.exit(main())
