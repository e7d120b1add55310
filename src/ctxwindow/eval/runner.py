"""Running strategies over a dataset at several budgets, and the metrics.

For every case (a question at its point in a conversation), every strategy
and every budget, the strategy's context is built and measured: are the
question's evidence messages in it, how many tokens it costs, how long it
took to build. Everything but the timings is deterministic.

Each question's outcome is kept too, one letter a question (``OUTCOMES``):
its evidence kept whole, compressed with the answer in the compressed form
of the evidence, partly lost or lost; ``results[S][B]["outcomes"]`` is the
string of them, in the order of the top-level ``"questions"`` list.

A compressed or summarized evidence message is credited only when the answer
is in that message's own text as sent, as whole words (``scoring.py``);
``evidence_recall_whole`` credits no compressed form at all. ``recent_recall``
is the share of the newest ``RECENT`` history messages in each context, whole
or compressed (``metrics.py``).

Each conversation is ingested once per strategy and budget, in order; the
questions asked at a point are built on the state at that point, read-only
(with ``replay``, every user turn is taken as an app would: the context sent
for it is built, and what a provider's prompt cache would serve of it is
counted, see ``replay.py``; the questions are then asked on that state)
(``measure`` ingests a case from scratch instead: the reference that the
tests hold the shared path to, result for result).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ctxwindow
from ctxwindow.archive.embedders import fork_safe
from ctxwindow.eval.choices import summary
from ctxwindow.eval.dataset import Conversation, Dataset

# scoring.py and metrics.py were split from here; their names are still imported from here
from ctxwindow.eval.metrics import percentile as percentile
from ctxwindow.eval.metrics import summarize as summarize
from ctxwindow.eval.replay import CacheMeter, Replayed, mean_by_turn
from ctxwindow.eval.scoring import COMPRESSED as COMPRESSED
from ctxwindow.eval.scoring import KEPT as KEPT
from ctxwindow.eval.scoring import LOST as LOST
from ctxwindow.eval.scoring import OUTCOMES as OUTCOMES
from ctxwindow.eval.scoring import PARTLY_LOST as PARTLY_LOST
from ctxwindow.eval.scoring import RECENT as RECENT
from ctxwindow.eval.scoring import Answerer as Answerer
from ctxwindow.eval.scoring import Measurement as Measurement
from ctxwindow.eval.scoring import answer_in as answer_in
from ctxwindow.eval.scoring import measure as measure
from ctxwindow.eval.scoring import recent_share as recent_share
from ctxwindow.eval.scoring import score as score
from ctxwindow.eval.strategies import DEFAULT_STRATEGIES, Case, Strategy, get_strategy
from ctxwindow.eval.vector_cache import use_cache
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.defaults import chat_tokenizer, model_info

DEFAULT_BUDGETS = (1024, 2048, 4096, 8192, 16384)
UNBOUNDED = "unbounded"


def run_eval(
    dataset: Dataset,
    *,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    model: str = "gpt-4o",
    answerer: Answerer | None = None,
    on_progress: Callable[[int], None] | None = None,
    workers: int = 1,
    replay: bool = False,
    embedding_cache: str | os.PathLike[str] | bool = True,
) -> dict[str, Any]:
    """Measure each strategy at each budget; returns the ``results.json`` document.

    ``workers`` > 1 measures conversations in that many processes (forked, so
    registered strategies come along; where fork is unavailable, and with an
    ``answerer``, the run stays in this process). Results do not depend on it.
    ``replay`` replays every user turn (see the module docstring) and adds
    ``"replay": {"turns", "cached_share", "input_usd_per_turn", ...}`` to each
    result, priced for ``model``. ``embedding_cache`` is the file the models' vectors are
    kept in for later runs (``vector_cache``): True for ``cache_path()``
    (``$CTXWINDOW_EMBEDDING_CACHE``, else ``~/.cache/ctxwindow``), False for none.
    """
    tokenizer = chat_tokenizer(model)
    chosen = [get_strategy(name) for name in strategies]  # unknown names fail before any work
    budgets = _check_budgets(budgets)
    if replay:
        _check_replays(chosen)
    cases = [Case(c, q) for c in dataset.conversations for q in c.questions]
    info = model_info(model)
    use_cache(embedding_cache)  # before the baselines' calibration embeds, and the workers fork
    runs = _calibrated(strategies, chosen, budgets, cases, tokenizer, info if replay else None)
    measured = _measure_all(dataset, runs, tokenizer, answerer, on_progress, workers)
    return {
        "model": model,
        "dataset": dataset.name,
        "input_price_per_mtok": info.input_price,
        "estimated_counts": not tokenizer.exact,  # the model has no exact tokenizer here
        "budgets": list(budgets),
        "strategies": list(strategies),
        # what each keeps, in its class's words, so the report explains its own names
        "strategy_descriptions": {s.name: summary(type(s).__doc__) for s in chosen},
        "n_conversations": len(dataset.conversations),
        "n_questions": len(cases),
        "ctxwindow_version": ctxwindow.__version__,
        **(_cache_prices(info) if replay else {}),
        "results": _summarized(strategies, runs, measured, info.input_price),
        "questions": [_question_entry(case) for case in cases],
    }


def _check_replays(strategies: Sequence[Strategy]) -> None:
    """``--replay`` needs every strategy to send the context of a user turn (``respond``)."""
    if cannot := [s.name for s in strategies if not s.replays]:
        raise ValueError(f"--replay: strategies {cannot} do not implement respond()")


def _question_entry(case: Case) -> dict[str, Any]:
    """One entry of the top-level ``"questions"`` list (the order of every ``outcomes``)."""
    question = case.question
    return {
        "conversation": case.conversation.id,
        "id": question.id,
        "category": question.category or "uncategorized",
        "question": question.question,
        "answer": question.answer,
        "evidence": list(question.evidence),
    }


def _cache_prices(info: Any) -> dict[str, Any]:
    return {
        "cached_input_price_per_mtok": info.cached_input_price,
        "cache_write_price_per_mtok": info.cache_write_price,
        "prompt_cache": info.cache or "prefix",
    }


@dataclass(frozen=True)
class _Run:
    """One strategy at one budget (calibrated), to measure on every conversation."""

    name: str
    strategy: Strategy
    budget: int | None
    facts: dict[str, Any]
    replay: Any = None  # the ModelInfo to price replayed turns with; None: no replay


@dataclass
class _Measured:
    """One conversation's measurements, and its replayed turns' costs (with replay)."""

    found: list[Measurement]
    replayed: Replayed | None = None


def _calibrated(
    names: Sequence[str],
    strategies: Sequence[Strategy],
    budgets: Sequence[int],
    cases: Sequence[Case],
    tokenizer: ChatTokenizer,
    replay: Any = None,
) -> list[_Run]:
    """Each strategy at each budget (once, unbounded, if it has none), calibrated on ``cases``
    (``replay``: the ModelInfo to price replayed turns with; None: no replay)."""
    runs: list[_Run] = []
    for name, strategy in zip(names, strategies, strict=True):
        for budget in budgets if strategy.budgeted else [None]:
            facts = strategy.calibrate(cases, budget, tokenizer) if budget is not None else {}
            runs.append(_Run(name, strategy, budget, facts, replay))
    return runs


def _summarized(
    strategies: Sequence[str],
    runs: Sequence[_Run],
    measured: Sequence[Sequence[_Measured]],
    price: float,
) -> dict[str, dict[str, Any]]:
    """``results[strategy][budget label]``: each run's metrics and calibration facts."""
    results: dict[str, dict[str, Any]] = {name: {} for name in strategies}
    for run, parts in zip(runs, measured, strict=True):
        label = UNBOUNDED if run.budget is None else str(run.budget)
        found = [m for part in parts for m in part.found]
        result = {**summarize(found, run.budget, price), **run.facts}
        if run.replay is not None:
            result["replay"] = _replay_summary([p.replayed for p in parts if p.replayed])
        results[run.name][label] = result
    return results


def _replay_summary(replayed: Sequence[Replayed]) -> dict[str, Any]:
    total = Replayed()
    for part in replayed:
        total.add(part)
    return {**total.summary(), "usd_by_turn": mean_by_turn([p.per_turn for p in replayed])}


# What forked workers measure: set before the pool forks, read by _measure_job.
_JOBS: tuple[Dataset, list[_Run], ChatTokenizer] | None = None


def _measure_all(
    dataset: Dataset,
    runs: list[_Run],
    tokenizer: ChatTokenizer,
    answerer: Answerer | None,
    on_progress: Callable[[int], None] | None,
    workers: int,
) -> list[list[_Measured]]:
    """Each run's measurements, conversation by conversation in dataset order.

    In parallel, a worker measures every run of a conversation (each budget
    and strategy), so what it computes once per conversation (an embedder's
    vectors of its turns) is computed once per run of the eval, and the
    longest conversations go first. Each worker's native thread pools get an
    equal share of the cores (``OMP_NUM_THREADS``, unless the user set it).
    """
    conversations = sorted(
        range(len(dataset.conversations)), key=lambda c: -len(dataset.conversations[c].messages)
    )
    jobs = [(r, c) for c in conversations for r in range(len(runs))]
    parallel = workers > 1 and answerer is None and len(jobs) > 1 and fork_safe()
    if parallel and "fork" in multiprocessing.get_all_start_methods():
        found = _in_workers(dataset, runs, tokenizer, jobs, workers, on_progress)
    else:
        found = []
        for r, c in jobs:
            run, conversation = runs[r], dataset.conversations[c]
            found.append(
                _progressed(
                    _measure_conversation(run, conversation, tokenizer, answerer), on_progress
                )
            )
    per_run: list[dict[int, _Measured]] = [{} for _ in runs]
    for (r, c), part in zip(jobs, found, strict=True):
        per_run[r][c] = part
    return [[parts[c] for c in range(len(dataset.conversations))] for parts in per_run]


def _in_workers(
    dataset: Dataset,
    runs: list[_Run],
    tokenizer: ChatTokenizer,
    jobs: list[tuple[int, int]],
    workers: int,
    on_progress: Callable[[int], None] | None,
) -> list[_Measured]:
    """The measurements of ``jobs`` (run, conversation), in order, from ``workers`` forked
    processes, every run of one conversation in one worker (a chunk)."""
    global _JOBS
    _JOBS = (dataset, runs, tokenizer)
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    try:
        with multiprocessing.get_context("fork").Pool(
            workers, initializer=_share_cores, initargs=(threads,)
        ) as pool:
            done = pool.imap(_measure_job, jobs, chunksize=len(runs))
            return [_progressed(part, on_progress) for part in done]
    finally:
        _JOBS = None


def _share_cores(threads: str) -> None:
    """A worker's native thread pools (OpenMP's) get its share of the cores."""
    os.environ.setdefault("OMP_NUM_THREADS", threads)


def _measure_job(job: tuple[int, int]) -> _Measured:
    assert _JOBS is not None
    dataset, runs, tokenizer = _JOBS
    return _measure_conversation(runs[job[0]], dataset.conversations[job[1]], tokenizer, None)


def _measure_conversation(
    run: _Run, conversation: Conversation, tokenizer: ChatTokenizer, answerer: Answerer | None
) -> _Measured:
    meter = None if run.replay is None else CacheMeter(tokenizer, run.replay)
    order = {question.id: i for i, question in enumerate(conversation.questions)}
    asked = [
        (order[case.question.id], score(run.strategy, state, case, tokenizer, answerer))
        for case, state in _asked(run.strategy, conversation, run.budget, tokenizer, meter)
    ]
    found = [measured for _, measured in sorted(asked, key=lambda pair: pair[0])]  # file order
    return _Measured(found, None if meter is None else meter.replayed)


def _progressed(part: _Measured, on_progress: Callable[[int], None] | None) -> _Measured:
    if on_progress is not None:
        on_progress(len(part.found))
    return part


def total_steps(dataset: Dataset, strategies: Sequence[str], budgets: Sequence[int]) -> int:
    """How many contexts ``run_eval`` builds (for a progress bar)."""
    labels = sum(len(budgets) if get_strategy(s).budgeted else 1 for s in strategies)
    return labels * dataset.n_questions


def _asked(
    strategy: Strategy,
    conversation: Conversation,
    budget: int | None,
    tokenizer: ChatTokenizer,
    meter: CacheMeter | None = None,
) -> Iterator[tuple[Case, Any]]:
    """Each question of the conversation with the state it is asked on; one ingestion
    (with a ``meter``, every user turn replayed, to the conversation's end)."""
    state = strategy.start(budget, tokenizer)
    ingested = 0

    def take(at: int) -> None:
        mid, message = conversation.message_ids[at], conversation.messages[at]
        if meter is not None and message["role"] == "user":
            meter.sent(strategy.respond(state, mid, message))
        else:
            strategy.ingest(state, mid, message)

    asked = sorted(conversation.questions, key=conversation.seen)  # stable: file order at a point
    for question in asked:
        seen = conversation.seen(question)
        for at in range(ingested, seen):
            take(at)
        ingested = seen
        yield Case(conversation, question), state
    if meter is not None:
        for at in range(ingested, len(conversation.messages)):
            take(at)


def _check_budgets(budgets: Sequence[int]) -> list[int]:
    if not budgets:
        raise ValueError("give at least one budget")
    bad = [b for b in budgets if not isinstance(b, int) or b < 1]
    if bad:
        raise ValueError(f"budgets must be positive integers, got {bad}")
    return sorted(set(budgets))
