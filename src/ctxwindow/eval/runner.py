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
is in that message's own text as sent (``Built.compressed_text``), as whole
words (``answer_in``): not anywhere in the context, where a short answer such
as "yes" or "two" is found whether the evidence kept it or not.
``evidence_recall_whole`` credits no compressed form at all. ``recent_recall``
is the share of the newest ``RECENT`` history messages in each context, whole
or compressed.

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
import re
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ctxwindow
from ctxwindow.archive.embedders import fork_safe
from ctxwindow.eval.choices import summary
from ctxwindow.eval.dataset import Conversation, Dataset, Question
from ctxwindow.eval.replay import CacheMeter, Replayed, mean_by_turn
from ctxwindow.eval.strategies import DEFAULT_STRATEGIES, Built, Case, Strategy, get_strategy
from ctxwindow.messages import Message
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.defaults import chat_tokenizer, model_info

DEFAULT_BUDGETS = (1024, 2048, 4096, 8192, 16384)
UNBOUNDED = "unbounded"

# What became of a question's evidence messages in a built context, one letter each.
# A compressed evidence message is present only if the answer is in its compressed form.
KEPT = "k"  # all kept whole
COMPRESSED = "c"  # all present, some only compressed or summarized, each with the answer
PARTLY_LOST = "p"  # some present, not all
LOST = "l"  # none present
OUTCOMES = {
    KEPT: "kept whole",
    COMPRESSED: "compressed, the answer in the compressed form of the evidence",
    PARTLY_LOST: "partly lost",
    LOST: "lost",
}
RECENT = 4  # recent_recall: how many of the newest history messages every context should keep

# Given a built context and its question, return a score in [0, 1].
Answerer = Callable[[list[Message], Question], float]


@dataclass(frozen=True)
class Measurement:
    """What one built context scored."""

    category: str
    all_evidence: bool
    evidence_share: float
    tokens: int
    build_ms: float
    outcome: str  # one of OUTCOMES
    score: float | None = None
    recent_share: float = 1.0  # of the newest RECENT history messages, the share present


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
) -> dict[str, Any]:
    """Measure each strategy at each budget; returns the ``results.json`` document.

    ``workers`` > 1 measures conversations in that many processes (forked, so
    registered strategies come along; where fork is unavailable, and with an
    ``answerer``, the run stays in this process). Results do not depend on it.
    ``replay`` replays every user turn (see the module docstring) and adds
    ``"replay": {"turns", "cached_share", "input_usd_per_turn", ...}`` to each
    result, priced for ``model``.
    """
    tokenizer = chat_tokenizer(model)
    chosen = [get_strategy(name) for name in strategies]  # unknown names fail before any work
    budgets = _check_budgets(budgets)
    if replay and (cannot := [s.name for s in chosen if not s.replays]):
        raise ValueError(f"--replay: strategies {cannot} do not implement respond()")
    cases = [Case(c, q) for c in dataset.conversations for q in c.questions]
    info = model_info(model)
    price = info.input_price
    runs = _calibrated(strategies, chosen, budgets, cases, tokenizer)
    if replay:
        runs = [_Run(r.name, r.strategy, r.budget, r.facts, info) for r in runs]
    measured = _measure_all(dataset, runs, tokenizer, answerer, on_progress, workers)
    return {
        "model": model,
        "dataset": dataset.name,
        "input_price_per_mtok": price,
        "estimated_counts": not tokenizer.exact,  # the model has no exact tokenizer here
        "budgets": list(budgets),
        "strategies": list(strategies),
        # what each keeps, in its class's words, so the report explains its own names
        "strategy_descriptions": {s.name: summary(type(s).__doc__) for s in chosen},
        "n_conversations": len(dataset.conversations),
        "n_questions": len(cases),
        "ctxwindow_version": ctxwindow.__version__,
        **(_cache_prices(info) if replay else {}),
        "results": _summarized(strategies, runs, measured, price),
        "questions": [_question_entry(case) for case in cases],
    }


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
) -> list[_Run]:
    """Each strategy at each budget (once, unbounded, if it has none), calibrated on ``cases``."""
    runs: list[_Run] = []
    for name, strategy in zip(names, strategies, strict=True):
        for budget in budgets if strategy.budgeted else [None]:
            facts = strategy.calibrate(cases, budget, tokenizer) if budget is not None else {}
            runs.append(_Run(name, strategy, budget, facts))
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
    global _JOBS
    conversations = sorted(
        range(len(dataset.conversations)), key=lambda c: -len(dataset.conversations[c].messages)
    )
    jobs = [(r, c) for c in conversations for r in range(len(runs))]
    parallel = workers > 1 and answerer is None and len(jobs) > 1 and fork_safe()
    if parallel and "fork" in multiprocessing.get_all_start_methods():
        _JOBS = (dataset, runs, tokenizer)
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        try:
            with multiprocessing.get_context("fork").Pool(
                workers, initializer=_share_cores, initargs=(threads,)
            ) as pool:
                done = pool.imap(_measure_job, jobs, chunksize=len(runs))
                found = [_progressed(part, on_progress) for part in done]
        finally:
            _JOBS = None
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


def measure(
    strategy: Strategy,
    case: Case,
    budget: int | None,
    tokenizer: ChatTokenizer,
    answerer: Answerer | None = None,
) -> Measurement:
    """Ingest one case's history from scratch (untimed), then build and score its context."""
    return score(strategy, strategy.prepare(case, budget, tokenizer), case, tokenizer, answerer)


def score(
    strategy: Strategy,
    state: Any,
    case: Case,
    tokenizer: ChatTokenizer,
    answerer: Answerer | None = None,
) -> Measurement:
    """Build the case's context on ``state`` (timed) and score it."""
    start = time.perf_counter()
    built: Built = strategy.build(state, case)
    build_ms = (time.perf_counter() - start) * 1000
    evidence = case.question.evidence
    whole, compressed = _present(evidence, built, case.question.answer)
    present = whole + compressed
    score = answerer(built.messages, case.question) if answerer is not None else None
    return Measurement(
        category=case.question.category or "uncategorized",
        all_evidence=present == len(evidence),
        evidence_share=present / len(evidence),
        tokens=tokenizer.count(built.messages),
        build_ms=build_ms,
        outcome=_outcome(whole, compressed, len(evidence)),
        score=score,
        recent_share=recent_share(built, case),
    )


def _present(evidence: Sequence[str], built: Built, answer: str) -> tuple[int, int]:
    """How many evidence messages are kept whole, and how many more are compressed with
    the answer in their own compressed text."""
    whole = sum(1 for mid in evidence if mid in built.kept_ids)
    compressed = sum(
        1
        for mid in evidence
        if mid not in built.kept_ids
        and mid in built.compressed_ids
        and answer_in(answer, built.compressed_text.get(mid, ""))
    )
    return whole, compressed


def recent_share(built: Built, case: Case) -> float:
    """The share of the case's newest ``RECENT`` history messages (a tool call or result
    is one too) that the context has, whole or compressed; 1.0 with no history."""
    newest = [mid for mid, _ in case.history[-RECENT:]]
    if not newest:
        return 1.0
    present = sum(1 for mid in newest if mid in built.kept_ids or mid in built.compressed_ids)
    return present / len(newest)


# A run of letters and numbers (\w less the underscore), as normalize() keeps them.
_WORD = re.compile(r"[^\W_]+")
# Scripts written without spaces between words (Han, kana, and Hangul, whose particles
# attach to the word): one of their characters ends a word wherever it stands.
_UNSPACED = (
    (0x1100, 0x11FF), (0x2E80, 0x2FDF), (0x3040, 0x30FF), (0x3130, 0x318F),
    (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF), (0x20000, 0x3FFFF),
)  # fmt: skip


def answer_in(answer: str, text: str) -> bool:
    """Whether ``answer`` is in ``text`` as whole words: both NFKC-normalized and
    casefolded, punctuation and spacing ignored ("A-1042" is found in "a 1042"), and
    each end of the answer at a word boundary, so "two" is not found in "network".
    In scripts that put no spaces between words (Chinese, Japanese, Korean) a
    boundary cannot be seen: an end of the answer in such a character needs none
    (plain containment), and such a character next to it is a boundary.

    >>> answer_in("two", "a network of two"), answer_in("two", "a network")
    (True, False)
    >>> answer_in("东京", "我住在东京市"), answer_in("iPhone", "买了iPhone手机")
    (True, True)
    """
    wanted, words = _words(answer), _words(text)
    if not wanted:
        return False
    start = words.find(wanted)
    while start != -1:
        end = start + len(wanted)
        if _ends_a_word(wanted[0], words[start - 1 : start]) and _ends_a_word(
            wanted[-1], words[end : end + 1]
        ):
            return True
        start = words.find(wanted, start + 1)
    return False


def _words(text: str) -> str:
    """NFKC, casefolded: its runs of letters and numbers, one space between them."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def _ends_a_word(edge: str, neighbour: str) -> bool:
    """Whether the answer's ``edge`` character, beside ``neighbour`` ("" at an end of the
    text), ends a word there."""
    return neighbour in ("", " ") or _unspaced(edge) or _unspaced(neighbour)


def _unspaced(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in _UNSPACED)


def _outcome(whole: int, compressed: int, total: int) -> str:
    if whole == total:
        return KEPT
    if whole + compressed == total:
        return COMPRESSED
    return PARTLY_LOST if whole + compressed else LOST


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


def _check_budgets(budgets: Sequence[int]) -> list[int]:
    if not budgets:
        raise ValueError("give at least one budget")
    bad = [b for b in budgets if not isinstance(b, int) or b < 1]
    if bad:
        raise ValueError(f"budgets must be positive integers, got {bad}")
    return sorted(set(budgets))
