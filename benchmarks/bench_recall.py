"""Evidence recall of the strategies against plain BM25, side by side in one run.

On real long conversations (LoCoMo: ``../shared/data/locomo-dev.json`` beside
the repository, or the file given as the first argument) and on the built-in
datasets, ``ctxwindow eval``'s runner measures, by budget and by category:

- ``token_window``: the newest whole turns that fit;
- ``hybrid``: ctxwindow's default (priority window, rolling summary, lexical
  recall), and ``hybrid_dense`` with dense embeddings fused in when the
  ``embeddings`` extra is installed;
- ``bm25``: ctxwindow's archive ranking alone over every turn (no window,
  no neighbours, no summary);
- ``bm25s``: the reference of ``shared/data/README.md`` computed here with
  the bm25s package (Lucene BM25, k1 1.5, b 0.75, English stop words,
  Snowball stemming; every turn ranked by the question, the best that fit
  taken), on the same turns with the same token counts.

It prints the wall time of ``token_window,hybrid,hybrid_norecall`` at five
budgets (the issue's target: all ten LoCoMo conversations in 60 s here, so
about 30 s for the five of the dev file) and hybrid's margin over each BM25.
Run with ``make bench`` (the ``bench`` extra installs bm25s and PyStemmer).
Nothing here asserts a number.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwindow.eval import Built, Case, Strategy, load_dataset, register_strategy, run_eval
from ctxwindow.eval.dataset import Dataset
from ctxwindow.messages import Message
from ctxwindow.tokens.chat import ChatTokenizer

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
LOCOMO_BUDGETS = [512, 1024, 2048, 4096, 8192]
BUILTIN_BUDGETS = [1024, 2048, 4096, 8192, 16384]
TIMED = ["token_window", "hybrid", "hybrid_norecall"]
WORKERS = os.cpu_count() or 1


@dataclass
class _Turns:
    budget: int
    tokenizer: ChatTokenizer
    ids: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    index: Any = None
    indexed: int = -1


class BM25sReference(Strategy):
    """The README's reference: bm25s over every turn, the question as the query."""

    name = "bm25s"

    def start(self, budget: int | None, tokenizer: ChatTokenizer) -> Any:
        assert budget is not None
        return _Turns(budget, tokenizer)

    def ingest(self, state: Any, message_id: str, message: Message) -> None:
        state.ids.append(message_id)
        state.messages.append(message)

    def build(self, state: Any, case: Case) -> Built:
        if state.indexed != len(state.ids):  # the questions at one point share the index
            state.index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
            state.index.index(_tokens([_text(m) for m in state.messages]), show_progress=False)
            state.sizes = [state.tokenizer.message_tokens(m) for m in state.messages]
            state.indexed = len(state.ids)
        room = state.budget - state.tokenizer.count([case.prompt])
        found, scores = state.index.retrieve(
            _tokens([case.question.question]), k=len(state.ids), show_progress=False
        )
        kept, used = [], 0
        for i, score in zip(found[0], scores[0], strict=True):
            if score <= 0:
                break
            if used + state.sizes[i] <= room:
                used += state.sizes[i]
                kept.append(int(i))
        kept.sort()
        messages = [state.messages[i] for i in kept]
        return Built([*messages, case.prompt], frozenset(state.ids[i] for i in kept))


def _text(message: Message) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _tokens(texts: list[str]) -> Any:
    return bm25s.tokenize(texts, stopwords="en", stemmer=STEMMER, show_progress=False)


def dense_available() -> str | None:
    """None when hybrid_dense can run, else why not."""
    try:
        from ctxwindow.archive.embedders import MiniLMEmbedder

        MiniLMEmbedder()
    except Exception as exc:  # the extra is optional: say why and go on
        return f"hybrid_dense not measured: {exc}".splitlines()[0]
    return None


def measure(dataset: Dataset, budgets: list[int], dense: bool) -> None:
    start = time.perf_counter()
    timed = run_eval(dataset, strategies=TIMED, budgets=budgets, workers=WORKERS)
    wall = time.perf_counter() - start
    print(
        f"\n{dataset.name}: {len(dataset.conversations)} conversations, "
        f"{dataset.n_questions} questions; {', '.join(TIMED)} at {len(budgets)} budgets "
        f"in {wall:.1f} s ({WORKERS} workers)"
    )
    others = ["bm25", "bm25s", *(["hybrid_dense"] if dense else [])]
    start = time.perf_counter()
    rest = run_eval(dataset, strategies=others, budgets=budgets, workers=WORKERS)
    print(f"  ({', '.join(others)} in {time.perf_counter() - start:.1f} s)")
    results = {**timed["results"], **rest["results"]}
    order = ["token_window", "hybrid_norecall", "hybrid", *others]
    print_table("evidence recall (%)", results, order, budgets)
    print_margins(results, budgets)
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
        print_table(f"{category} ({n})", by, ["token_window", "hybrid", *others], budgets)


def print_table(title: str, results: dict[str, Any], order: list[str], budgets: list[int]) -> None:
    print(f"  {title:<24}" + "".join(f"{b:>8}" for b in budgets))
    for name in order:
        rows = results[name]
        cells = "".join(f"{100 * rows[str(b)]['evidence_recall']:>8.1f}" for b in budgets)
        print(f"    {name:<22}{cells}")


def print_margins(results: dict[str, Any], budgets: list[int]) -> None:
    for reference in ("bm25s", "bm25"):
        hybrid, other = results["hybrid"], results[reference]
        margins = [
            100 * (hybrid[str(b)]["evidence_recall"] - other[str(b)]["evidence_recall"])
            for b in budgets
        ]
        print(f"    {'hybrid - ' + reference:<22}" + "".join(f"{m:>+8.1f}" for m in margins))


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # progress as it comes
    register_strategy(BM25sReference.name, BM25sReference)
    dense = dense_available()
    if dense is not None:
        print(dense)
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else LOCOMO
    if path.exists():
        locomo, _ = load_dataset(f"locomo:{path}")
        measure(locomo, LOCOMO_BUDGETS, dense is None)
    else:
        print(f"{path} not found: LoCoMo not measured (see shared/data/README.md)")
    builtin, _ = load_dataset("builtin:all")
    measure(builtin, BUILTIN_BUDGETS, dense is None)


try:
    import bm25s
    import Stemmer
except ImportError:  # pragma: no cover - the bench extra
    sys.exit("bench_recall needs the bench extra: pip install -e '.[bench]' (bm25s, PyStemmer)")

STEMMER = Stemmer.Stemmer("english")

if __name__ == "__main__":
    main()
