"""The findings at the top of the report: what the numbers say, in sentences.

Every sentence is computed from the results, none is canned: which strategy
keeps the most evidence at each budget and by how much, how the best
budgeted run compares with the unbounded ones, the cheapest run within
``CLOSE`` of the best, where more budget stops paying, what the prompt cache
did (with ``--replay``), categories where a leader falls behind, contexts
over their budget, strategies that leave out some of the last messages before
a question, and the best answers (with answer scoring).

>>> results = {"results": {
...     "a": {"1024": {"evidence_recall": 0.5, "mean_tokens": 900}},
...     "b": {"1024": {"evidence_recall": 0.25, "mean_tokens": 1000}}}}
>>> findings(results)[0]
'At 1,024 tokens a keeps the most evidence (50.0%), 25.0 points ahead of b.'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxwindow.eval.report.formats import percent, usd
from ctxwindow.eval.report.runs import Run, by_strategy, read_runs

CLOSE = 0.05  # "within 5 points of the best"
FLAT = 0.02  # more budget "stops paying" when every larger one adds less than this
BEHIND = 0.05  # a leader "falls behind" in a category by at least this much
MOST_BEHIND = 3  # at most this many such sentences
RECENT = 4  # recent_recall counts the last this many messages (the runner's RECENT)
RECENT_KEPT = 0.99  # below this recent_recall a strategy is said to drop recent messages


def findings(results: Mapping[str, Any]) -> list[str]:
    """The findings of ``results``, a sentence each, most telling first."""
    runs = read_runs(results)
    if not runs:
        return []
    found = [sentence for finding in FINDINGS for sentence in finding(runs)]
    return found or [_only_run(max(runs, key=lambda run: run.recall))]


def _label(run: Run) -> str:
    if run.budget is None:
        return f"{run.strategy} with no budget"
    return f"{run.strategy} at {run.budget:,} tokens"


def _points(difference: float) -> str:
    return f"{abs(difference) * 100:.1f} points"


def _tokens(run: Run) -> str:
    return f"{run.tokens:,.0f} tokens a question"


def _fewer(more: float, fewer: float) -> str:
    """How many times fewer tokens ``fewer`` is than ``more``, in words."""
    ratio = more / fewer if more > 0 and fewer > 0 else 1.0
    if ratio >= 1.1:
        return f"{ratio:.1f}× fewer tokens"
    if ratio <= 1 / 1.1:
        return f"{1 / ratio:.1f}× more tokens"
    return "about as many tokens"


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _by_budget(runs: Sequence[Run]) -> dict[int, list[Run]]:
    """The budgeted runs of each budget, budgets ascending."""
    groups: dict[int, list[Run]] = {}
    for run in runs:
        if run.budget is not None:
            groups.setdefault(run.budget, []).append(run)
    return dict(sorted(groups.items()))


def _ranked(group: Sequence[Run]) -> list[Run]:
    """Most evidence first; among equals, fewer tokens first."""
    return sorted(group, key=lambda run: (-run.recall, run.tokens))


def _leaders(runs: Sequence[Run]) -> list[str]:
    """Who keeps the most evidence at each budget where strategies compete, and by how much;
    budgets in a row with the same leader are told together."""
    contests = [(b, _ranked(group)) for b, group in _by_budget(runs).items() if len(group) > 1]
    if not contests:
        return []
    stretches = _stretches(contests)
    if len(stretches) == 1 and len(contests) > 1 and _leader(contests[0][1]) is not None:
        first, last = contests[0][1][0], contests[-1][1][0]
        return [
            f"{first.strategy} keeps the most evidence at every budget, from "
            f"{percent(first.recall)} at {first.budget:,} tokens to {percent(last.recall)} at "
            f"{last.budget:,}, {_lead(contests)}."
        ]
    sentence = "; ".join(_stretch_clause(stretch) for stretch in stretches)
    return [sentence[0].upper() + sentence[1:] + "."]


Contest = tuple[int, list[Run]]  # a budget, and its runs ranked


def _leader(ranked: Sequence[Run]) -> str | None:
    """The strategy alone at the top, None for a tie."""
    return ranked[0].strategy if ranked[0].recall > ranked[1].recall else None


def _stretches(contests: Sequence[Contest]) -> list[list[Contest]]:
    """Consecutive budgets with the same leader (a tie is a stretch of its own)."""
    stretches: list[list[Contest]] = []
    for contest in contests:
        leader = _leader(contest[1])
        if stretches and leader is not None and _leader(stretches[-1][0][1]) == leader:
            stretches[-1].append(contest)
        else:
            stretches.append([contest])
    return stretches


def _stretch_clause(stretch: Sequence[Contest]) -> str:
    budget, ranked = stretch[0]
    top = ranked[0]
    if len(stretch) == 1:
        tied = [run.strategy for run in ranked if run.recall == top.recall]
        if len(tied) > 1:
            most = f"the most evidence ({percent(top.recall)})"
            return f"at {budget:,} tokens {_and(tied)} tie for {most}"
        return (
            f"at {budget:,} tokens {top.strategy} keeps the most evidence "
            f"({percent(top.recall)}), {_lead(stretch)}"
        )
    last_budget, last = stretch[-1][0], stretch[-1][1][0]
    return (
        f"from {budget:,} to {last_budget:,} tokens {top.strategy} keeps the most evidence "
        f"({percent(top.recall)} to {percent(last.recall)}), {_lead(stretch)}"
    )


def _lead(contests: Sequence[Contest]) -> str:
    """``"5.0–11.0 points ahead of token_window"``: the leader's margin over the runner-up."""
    leads = [ranked[0].recall - ranked[1].recall for _, ranked in contests]
    seconds = {ranked[1].strategy for _, ranked in contests}
    behind = f"of {seconds.pop()}" if len(seconds) == 1 else "of the next best"
    if _points(min(leads)) == _points(max(leads)):
        return f"{_points(leads[0])} ahead {behind}"
    return f"{min(leads) * 100:.1f}–{_points(max(leads))} ahead {behind}"


def _ceilings(runs: Sequence[Run]) -> list[str]:
    """Each unbounded run against the best budgeted run."""
    budgeted = _ranked([run for run in runs if run.budget is not None])
    if not budgeted:
        return []
    best = budgeted[0]
    sentences = []
    for ceiling in (run for run in runs if run.budget is None):
        gap = ceiling.recall - best.recall
        how = (
            f"matches it with {percent(best.recall)}"
            if gap <= 0
            else f"comes closest, {_points(gap)} below with {percent(best.recall)}"
        )
        sentences.append(
            f"{_label(ceiling)} keeps {percent(ceiling.recall)} for {_tokens(ceiling)}; "
            f"{_label(best)} {how}, for {_fewer(ceiling.tokens, best.tokens)}."
        )
    return sentences


def _cheapest_close(runs: Sequence[Run]) -> list[str]:
    """The run with the fewest tokens within ``CLOSE`` of the best evidence recall."""
    if len(runs) < 2:
        return []
    best = _ranked(runs)[0]
    close = [run for run in runs if run.recall >= best.recall - CLOSE - 1e-9]
    cheapest = min(close, key=lambda run: (run.tokens, -run.recall))
    within = f"within {CLOSE * 100:g} points of the best"
    if cheapest is best:
        return [f"No run {within}, {_label(best)} ({percent(best.recall)}), costs fewer tokens."]
    return [
        f"The cheapest run {within} ({_label(best)}: {percent(best.recall)}, "
        f"{_tokens(best)}) is {_label(cheapest)}: {percent(cheapest.recall)} for "
        f"{_tokens(cheapest)}, {_fewer(best.tokens, cheapest.tokens)}."
    ]


def _plateaus(runs: Sequence[Run]) -> list[str]:
    """For each strategy with several budgets: where more budget stops paying, or what it
    still gains at the largest."""
    flat: dict[int, list[str]] = {}
    rising: dict[tuple[int, int], list[tuple[str, float]]] = {}
    for strategy, group in by_strategy(runs).items():
        curve = [run for run in group if run.budget is not None]
        if len(curve) < 2:
            continue
        start, before, last = _flat_from(curve), curve[-2], curve[-1]
        if start is None:
            step = (before.budget or 0, last.budget or 0)
            rising.setdefault(step, []).append((strategy, last.recall - before.recall))
        else:
            flat.setdefault(start.budget or 0, []).append(
                f"{strategy} ({percent(start.recall)} → {percent(last.recall)} at {last.budget:,})"
            )
    sentences = [
        f"From {budget:,} tokens on, more budget adds less than {FLAT * 100:g} points for "
        f"{_and(names)}."
        for budget, names in sorted(flat.items())
    ]
    sentences += [_still_gaining(*step, gains) for step, gains in sorted(rising.items())]
    return sentences


def _still_gaining(before: int, last: int, gains: Sequence[tuple[str, float]]) -> str:
    """``"From 8,192 to 16,384 tokens a still gains 42.9 points, b 28.6 and c 11.9."``"""
    (first, gain), rest = gains[0], gains[1:]
    gains_told = [f"{first} still gains {_points(gain)}"]
    gains_told += [f"{name} {difference * 100:.1f}" for name, difference in rest]
    return f"From {before:,} to {last:,} tokens {_and(gains_told)}."


def _flat_from(curve: Sequence[Run]) -> Run | None:
    """The first run of a budget curve that no larger budget beats by ``FLAT``, unless
    that is only the last run."""
    for i, run in enumerate(curve[:-1]):
        if max(later.recall for later in curve[i + 1 :]) - run.recall < FLAT:
            return run
    return None


def _replay(runs: Sequence[Run]) -> list[str]:
    """With ``--replay``: what each turn cost with the prompt cache, at the largest budget."""
    replayed = [run for run in runs if isinstance(run.metrics.get("replay"), Mapping)]
    if not replayed:
        return []
    largest = max(replayed, key=lambda run: (run.budget is not None, run.budget or 0)).budget
    group = sorted((run for run in replayed if run.budget == largest), key=_per_turn)
    cheapest, dearest = group[0], group[-1]
    where = "with no budget" if largest is None else f"at {largest:,} tokens"
    sentence = (
        f"Replayed turn by turn with the prompt cache {where}, {cheapest.strategy} pays "
        f"{usd(_per_turn(cheapest))} a turn ({_cached(cheapest)} of its input from the cache)"
    )
    if dearest is not cheapest:
        times = _per_turn(dearest) / _per_turn(cheapest) if _per_turn(cheapest) else 0.0
        sentence += (
            f", {dearest.strategy} {usd(_per_turn(dearest))} ({_cached(dearest)})"
            + (f": {times:.1f}× as much" if times >= 1.1 else "")
            + f", for {percent(cheapest.recall)} of the evidence against "
            f"{percent(dearest.recall)}"
        )
    return [sentence + "."]


def _per_turn(run: Run) -> float:
    return float(run.metrics["replay"]["input_usd_per_turn"])


def _cached(run: Run) -> str:
    return f"{float(run.metrics['replay']['cached_share']) * 100:.0f}%"


def _behind(runs: Sequence[Run]) -> list[str]:
    """Categories where a budget's leader keeps ``BEHIND`` less than another strategy;
    without any, the weakest category of the leader at the largest budget."""
    gaps = []
    for budget, group in _by_budget(runs).items():
        ranked = _ranked([run for run in group if run.metrics.get("by_category")])
        if len(ranked) > 1 and ranked[0].recall > ranked[1].recall:
            gaps += _category_gaps(budget, ranked[0], ranked[1:])
    if not gaps:
        return _weakest_category(runs)
    worst: dict[tuple[str, str], tuple[float, str]] = {}
    for gap, key, sentence in sorted(gaps, key=lambda g: -g[0]):
        worst.setdefault(key, (gap, sentence))
    return [sentence for _, sentence in list(worst.values())[:MOST_BEHIND]]


def _category_gaps(
    budget: int, leader: Run, others: Sequence[Run]
) -> list[tuple[float, tuple[str, str], str]]:
    gaps = []
    for category, mine in leader.metrics["by_category"].items():
        best = max(others, key=lambda run: _category_recall(run, category))
        gap = _category_recall(best, category) - float(mine["evidence_recall"])
        if gap >= BEHIND - 1e-9:
            n = f" ({mine['n']} questions)" if mine.get("n") else ""
            gaps.append((gap, (leader.strategy, category), (
                f"{leader.strategy} leads at {budget:,} tokens but falls behind on "
                f"{category}{n}: {percent(mine['evidence_recall'])} against "
                f"{percent(_category_recall(best, category))} for {best.strategy}."
            )))  # fmt: skip
    return gaps


def _category_recall(run: Run, category: str) -> float:
    return float(run.metrics["by_category"].get(category, {}).get("evidence_recall", -1.0))


def _weakest_category(runs: Sequence[Run]) -> list[str]:
    budgets = _by_budget(runs)
    if not budgets:
        return []
    largest = max(budgets)
    ranked = _ranked([run for run in budgets[largest] if run.metrics.get("by_category")])
    if not ranked or len(ranked[0].metrics["by_category"]) < 2:
        return []
    leader = ranked[0]
    category = min(leader.metrics["by_category"], key=lambda c: _category_recall(leader, c))
    weakest = _category_recall(leader, category)
    if leader.recall - weakest < BEHIND - 1e-9:
        return []
    return [
        f"{leader.strategy}'s weakest category at {largest:,} tokens is {category}: "
        f"{percent(weakest)} against {percent(leader.recall)} overall."
    ]


def _over_budget(runs: Sequence[Run]) -> list[str]:
    """Strategies whose contexts went over their budget, at their worst."""
    over = [run for run in runs if run.budget is not None and _over_rate(run) > 0]
    worst: dict[str, Run] = {}
    for run in sorted(over, key=lambda run: -_over_rate(run)):
        worst.setdefault(run.strategy, run)
    clauses = [
        f"{strategy} in {percent(_over_rate(run))} of its contexts at {run.budget:,} tokens"
        for strategy, run in worst.items()
    ]
    return [f"Over budget, at worst: {_and(clauses)}."] if clauses else []


def _over_rate(run: Run) -> float:
    return float(run.metrics.get("over_budget_rate") or 0.0)


def _recent_dropped(runs: Sequence[Run]) -> list[str]:
    """Strategies whose contexts leave out some of the last messages before the question
    (``recent_recall`` below ``RECENT_KEPT``), at their worst."""
    low = [run for run in runs if _recent(run) < RECENT_KEPT]
    worst: dict[str, Run] = {}
    for run in sorted(low, key=_recent):
        worst.setdefault(run.strategy, run)
    clauses = [
        f"{strategy} keeps {percent(_recent(run))} of them "
        f"{'with no budget' if run.budget is None else f'at {run.budget:,} tokens'}"
        + _all_of_them(run)
        for strategy, run in worst.items()
    ]
    if not clauses:
        return []
    return [
        f"Not every context has the last {RECENT} messages before its question: {_and(clauses)}."
    ]


def _recent(run: Run) -> float:
    value = run.metrics.get("recent_recall")
    return 1.0 if value is None else float(value)  # results of an older version lack it


def _all_of_them(run: Run) -> str:
    share = run.metrics.get("recent_all")
    return "" if share is None else f" (all {RECENT} in {percent(float(share))} of its contexts)"


def _answers(runs: Sequence[Run]) -> list[str]:
    """With answer scoring: the run whose answers scored best."""
    scored = [run for run in runs if run.metrics.get("answer_score") is not None]
    if not scored:
        return []
    best = max(scored, key=lambda run: float(run.metrics["answer_score"]))
    return [
        f"Scored by the model, the best answers come from {_label(best)} "
        f"({float(best.metrics['answer_score']):.2f})."
    ]


def _only_run(run: Run) -> str:
    return (
        f"{_label(run)} keeps every evidence message of {percent(run.recall)} of the "
        f"questions, for {_tokens(run)}."
    )


FINDINGS: tuple[Callable[[Sequence[Run]], list[str]], ...] = (
    _leaders,
    _ceilings,
    _cheapest_close,
    _plateaus,
    _replay,
    _behind,
    _over_budget,
    _recent_dropped,
    _answers,
)
