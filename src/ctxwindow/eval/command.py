"""What ``ctxwindow eval`` does: check, load, measure with a progress bar, print, report."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ctxwindow.errors import CtxWindowError
from ctxwindow.eval.dataset import Dataset, DatasetError
from ctxwindow.eval.loaders import load_dataset
from ctxwindow.eval.runner import RECENT, Answerer, run_eval, total_steps
from ctxwindow.eval.strategies import get_strategy
from ctxwindow.extras import require
from ctxwindow.tokens.defaults import model_info


@dataclass(frozen=True)
class EvalOptions:
    datasets: Sequence[str]
    strategies: Sequence[str]
    budgets: Sequence[int]
    model: str = "gpt-4o"
    out: Path = Path("ctxwindow-report")
    skip_invalid: bool = False
    include_unanswerable: bool = False
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_judge: bool = False
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    replay: bool = False
    embedding_cache: Path | bool = True  # a file, the default one, or none (vector_cache)


def run_command(options: EvalOptions, console: Console | None = None) -> dict[str, Any]:
    """Run the evaluation as the CLI does; returns the results document."""
    # Piped output gets a width that fits the table rather than rich's 80 columns.
    console = console or Console(width=None if sys.stdout.isatty() else 150)
    errors = Console(stderr=True)
    _check_names(options)
    _check_extras(options)
    check_out(options.out)
    datasets = load_all(
        options.datasets,
        options.skip_invalid,
        errors,
        include_unanswerable=options.include_unanswerable,
    )
    dataset = merge(datasets)
    answerer = make_answerer(options)
    results = _measure_with_progress(dataset, options, answerer, errors)
    console.print(results_table(results))
    from ctxwindow.eval.report import write_report

    html = write_report(results, options.out)
    console.print(f"Report: {html}  (results.json and charts beside it)")
    return results


def _check_names(options: EvalOptions) -> None:
    """An unknown model or strategy fails before anything is loaded."""
    model_info(options.model)
    for name in options.strategies:
        get_strategy(name)


def _check_extras(options: EvalOptions) -> None:
    """A missing extra fails before anything is loaded or measured, not at the end."""
    require("eval", "ctxwindow eval (its charts)", packages=("matplotlib",))
    if options.llm_base_url is not None or options.llm_model is not None:
        require("eval", "answer scoring (--llm-base-url, --llm-model)", packages=("openai",))
    for name in options.strategies:
        extra = get_strategy(name).extra
        if extra is not None:
            require(extra, f"the strategy {name!r}")


class OutputError(CtxWindowError, ValueError):
    """``--out`` cannot be the report's folder; the text says why (before any work)."""


# What --out names when the folder does not exist yet: a file, not a folder.
FILE_SUFFIXES = (".html", ".htm", ".json", ".png")


def check_out(out: Path) -> None:
    """``OutputError`` unless the report can be written in the folder ``out``: an existing
    folder where files can be made (and its outputs are files), or a path a folder can be
    made at. Nothing is left behind by the check."""
    if out.exists():
        if not out.is_dir():
            raise OutputError(
                f"--out {out} is a file: --out names the folder that gets results.json,"
                " report.html and the charts"
            )
        _check_outputs(out)
        _probe(out, out, making_folder=False)
        return
    if out.suffix.lower() in FILE_SUFFIXES:
        raise OutputError(
            f"--out {out} looks like a file name: --out names the folder that gets"
            f" results.json, report.html and the charts (e.g. --out {out.with_suffix('')})"
        )
    parent = next(folder for folder in out.absolute().parents if folder.exists())
    if not parent.is_dir():
        raise OutputError(f"--out {out}: {parent} is a file, so no folder can be made in it")
    _probe(out, parent, making_folder=True)


def _check_outputs(out: Path) -> None:
    """The files the report writes in ``out``, where they exist, are files it may replace."""
    from ctxwindow.eval.report.charts import CHARTS

    for name in ("results.json", "report.html", *CHARTS):
        path = out / name
        if path.is_dir():
            raise OutputError(f"--out {out}: {path} is a folder, where a file is written")
        if path.exists() and not os.access(path, os.W_OK):
            raise OutputError(f"--out {out}: {path} is not writable")


def _probe(out: Path, folder: Path, *, making_folder: bool) -> None:
    """Make and remove a folder (or a file) in ``folder``, as writing the report will."""
    try:
        if making_folder:
            os.rmdir(tempfile.mkdtemp(prefix=".ctxwindow-", dir=folder))
        else:
            handle, path = tempfile.mkstemp(prefix=".ctxwindow-", dir=folder)
            os.close(handle)
            os.unlink(path)
    except OSError as exc:
        what = f"cannot make the folder {out}" if making_folder else f"cannot write in {out}"
        raise OutputError(f"--out {out}: {what}: {exc.strerror or exc}") from None


def _measure_with_progress(
    dataset: Dataset, options: EvalOptions, answerer: Answerer | None, errors: Console
) -> dict[str, Any]:
    """``run_eval`` with its progress on ``errors``: on a terminal a bar that disappears when
    it is done, else plain lines for a log (``PlainProgress``)."""
    steps = total_steps(dataset, options.strategies, options.budgets)
    if not errors.is_terminal:
        return _measure(dataset, options, answerer, PlainProgress(steps, errors).advance)
    with Progress(
        TextColumn("[bold]evaluating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
        auto_refresh=False,  # no refresh thread when run_eval forks its workers
    ) as progress:
        task = progress.add_task("eval", total=steps)

        def advance(n: int) -> None:
            progress.advance(task, n)
            progress.refresh()

        return _measure(dataset, options, answerer, advance)


def _measure(
    dataset: Dataset,
    options: EvalOptions,
    answerer: Answerer | None,
    on_progress: Callable[[int], None],
) -> dict[str, Any]:
    return run_eval(
        dataset,
        strategies=options.strategies,
        budgets=options.budgets,
        model=options.model,
        answerer=answerer,
        on_progress=on_progress,
        workers=options.workers,
        replay=options.replay,
        embedding_cache=options.embedding_cache,
    )


class PlainProgress:
    """Progress as plain lines, for a log or a pipe (a redrawn bar would fill it with
    control characters): ``eval: 120/758 steps (16 %), 0:00:42`` at the start, each time
    another ``every_percent`` is done, at least every ``every_seconds`` while steps
    arrive, and at the end.

    >>> ticks = iter([0.0, 1.0, 2.0, 40.0, 41.0])
    >>> progress = PlainProgress(200, Console(width=80), clock=lambda: next(ticks))
    eval: 0/200 steps (0 %), 0:00:00
    >>> progress.advance(4)  # 2 %, 1 s: nothing yet
    >>> progress.advance(6)  # 5 %
    eval: 10/200 steps (5 %), 0:00:02
    >>> progress.advance(1)  # 38 s later
    eval: 11/200 steps (5 %), 0:00:40
    >>> progress.advance(189)
    eval: 200/200 steps (100 %), 0:00:41
    """

    def __init__(
        self,
        total: int,
        console: Console,
        *,
        every_percent: int = 5,
        every_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.done = total, 0
        self._console, self._clock = console, clock
        self._every_percent, self._every_seconds = every_percent, every_seconds
        self._start = self._said_at = clock()
        self._next_percent = 0
        self._say(self._start)

    def advance(self, steps: int) -> None:
        self.done += steps
        now = self._clock()
        if self._percent() >= self._next_percent or now - self._said_at >= self._every_seconds:
            self._say(now)

    def _percent(self) -> int:
        return 100 * self.done // max(self.total, 1)

    def _say(self, now: float) -> None:
        percent = self._percent()
        self._next_percent = (percent // self._every_percent + 1) * self._every_percent
        self._said_at = now
        minutes, seconds = divmod(int(now - self._start), 60)
        elapsed = f"{minutes // 60}:{minutes % 60:02}:{seconds:02}"
        self._console.print(
            f"eval: {self.done}/{self.total} steps ({percent} %), {elapsed}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def load_all(
    specs: Sequence[str],
    skip_invalid: bool,
    errors: Console,
    *,
    include_unanswerable: bool = False,
) -> list[Dataset]:
    datasets = []
    for spec in specs:
        dataset, problems = load_dataset(
            spec, skip_invalid=skip_invalid, include_unanswerable=include_unanswerable
        )
        for problem in problems:
            errors.print(f"ctxwindow: skipped: {spec}: {problem}", markup=False, soft_wrap=True)
        datasets.append(dataset)
    return datasets


def merge(datasets: Sequence[Dataset]) -> Dataset:
    """One dataset from several; conversation ids must stay unique."""
    if len(datasets) == 1:
        return datasets[0]
    conversations = [c for d in datasets for c in d.conversations]
    name = ",".join(d.name for d in datasets)
    counts = Counter(c.id for c in conversations)
    twice = [
        f"conversation id {cid!r} is in more than one dataset" for cid, n in counts.items() if n > 1
    ]
    if twice:
        raise DatasetError(name, twice)
    return Dataset(name, tuple(conversations))


def make_answerer(options: EvalOptions) -> Answerer | None:
    if options.llm_base_url is None and options.llm_model is None:
        return None
    if options.llm_base_url is None or options.llm_model is None:
        raise ValueError("answer scoring needs both --llm-base-url and --llm-model")
    from ctxwindow.eval.llm import OpenAIAnswerer

    return OpenAIAnswerer(options.llm_base_url, options.llm_model, judge=options.llm_judge)


TABLE_COLUMNS = (
    "strategy",
    "budget",
    "evidence recall",
    "kept whole",
    "turn recall",
    "recent",
    "mean tokens",
    "$ / question",
    "build p50 ms",
    "p99 ms",
    "over budget",
)

# Under the table: what its two least obvious columns mean.
TABLE_NOTE = (
    "kept whole: evidence recall with no credit for compressed forms · "
    f"recent: share of the last {RECENT} messages before a question that its context keeps"
)


def results_table(results: dict[str, Any]) -> Table:
    """The terminal table: one row per strategy and budget."""
    table = Table(
        title=f"{results['dataset']} · {results['model']} · "
        f"{results['n_conversations']} conversations, {results['n_questions']} questions",
        caption=TABLE_NOTE,
    )
    scored = _scored(results)
    columns = [*TABLE_COLUMNS, "answer score"] if scored else list(TABLE_COLUMNS)
    replayed = _replayed(results)
    if replayed:
        columns += ["cached", "$/turn"]
    for column in columns:
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for strategy, per_budget in results["results"].items():
        for budget, metrics in per_budget.items():
            row = _table_row(strategy, budget, metrics, scored)
            if replayed:
                row += _replay_cells(metrics.get("replay"))
            table.add_row(*row)
    return table


def _replayed(results: dict[str, Any]) -> bool:
    """Whether the runs were replayed turn by turn (then the table shows cache and cost)."""
    return any("replay" in m for per in results["results"].values() for m in per.values())


def _replay_cells(replay: dict[str, Any] | None) -> list[str]:
    if replay is None:
        return ["—", "—"]
    return [f"{replay['cached_share']:.0%}", f"{replay['input_usd_per_turn']:.5f}"]


def _scored(results: dict[str, Any]) -> bool:
    """Whether some run has an answer score (then the table shows that column)."""
    return any(
        m.get("answer_score") is not None
        for per in results["results"].values()
        for m in per.values()
    )


def _table_row(strategy: str, budget: str, m: dict[str, Any], scored: bool) -> list[str]:
    label = f"{budget} (N={m['messages']})" if "messages" in m else budget
    row = [
        strategy,
        label,
        f"{m['evidence_recall']:.1%}",
        _percent(m.get("evidence_recall_whole")),
        f"{m['turn_recall']:.1%}",
        _percent(m.get("recent_recall")),
        f"{m['mean_tokens']:,.0f}",
        f"{m['mean_cost_usd']:.5f}",
        f"{m['build_ms_p50']:.3f}",
        f"{m['build_ms_p99']:.3f}",
        f"{m['over_budget_rate']:.0%}",
    ]
    if scored:
        row.append(_percent(m.get("answer_score")))
    return row


def _percent(value: float | None) -> str:
    """A share as a percent; "—" for a metric the run lacks (results of an older version)."""
    return "—" if value is None else f"{value:.1%}"
