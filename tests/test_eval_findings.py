"""The report's findings: each sentence comes from the numbers, and changes when they do."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from ctxwindow.eval.report import findings, render_html


def results_of(runs: dict[str, dict[str, tuple[float, float]]], **extra: Any) -> dict[str, Any]:
    """Results with ``runs[strategy][budget] = (evidence recall, mean tokens)``."""
    return {
        "model": "gpt-4o",
        "dataset": "test",
        "strategies": list(runs),
        "results": {
            strategy: {
                budget: {"evidence_recall": recall, "mean_tokens": tokens}
                for budget, (recall, tokens) in per_budget.items()
            }
            for strategy, per_budget in runs.items()
        },
        **extra,
    }


def typical() -> dict[str, Any]:
    """A window that keeps little, a hybrid that keeps more and levels off, the full history."""
    return results_of({
        "token_window": {"1024": (0.10, 900), "4096": (0.30, 3800), "16384": (0.60, 14000)},
        "hybrid": {"1024": (0.60, 950), "4096": (0.82, 3700), "16384": (0.83, 12000)},
        "full": {"unbounded": (0.95, 20000)},
    })  # fmt: skip


def sentence(results: dict[str, Any], start: str) -> str:
    """The one finding that contains ``start``."""
    [found] = [s for s in findings(results) if start in s]
    return found


def set_recall(results: dict[str, Any], strategy: str, budget: str, recall: float) -> None:
    results["results"][strategy][budget]["evidence_recall"] = recall


def test_the_leader_at_every_budget_and_its_margin() -> None:
    results = typical()
    assert sentence(results, "most evidence") == (
        "hybrid keeps the most evidence at every budget, from 60.0% at 1,024 tokens to 83.0% "
        "at 16,384, 23.0–52.0 points ahead of token_window."
    )
    set_recall(results, "hybrid", "1024", 0.15)
    assert "5.0–52.0 points ahead" in sentence(results, "most evidence")


def test_leaders_that_change_with_the_budget_are_told_in_stretches() -> None:
    results = typical()
    set_recall(results, "token_window", "16384", 0.90)
    assert sentence(results, "most evidence") == (
        "From 1,024 to 4,096 tokens hybrid keeps the most evidence (60.0% to 82.0%), "
        "50.0–52.0 points ahead of token_window; at 16,384 tokens token_window keeps the "
        "most evidence (90.0%), 7.0 points ahead of hybrid."
    )


def test_a_tie_is_named_as_one() -> None:
    results = typical()
    set_recall(results, "token_window", "4096", 0.82)
    assert "at 4,096 tokens hybrid and token_window tie for the most evidence (82.0%)" in (
        sentence(results, "most evidence")
    )


def test_the_unbounded_run_against_the_best_budgeted_one() -> None:
    results = typical()
    assert sentence(results, "with no budget keeps") == (
        "full with no budget keeps 95.0% for 20,000 tokens a question; hybrid at 16,384 tokens "
        "comes closest, 12.0 points below with 83.0%, for 1.7× fewer tokens."
    )
    set_recall(results, "hybrid", "16384", 0.95)
    assert "hybrid at 16,384 tokens matches it with 95.0%" in sentence(results, "no budget keeps")


def test_the_cheapest_run_close_to_the_best() -> None:
    results = typical()
    assert sentence(results, "within 5 points") == (
        "No run within 5 points of the best, full with no budget (95.0%), costs fewer tokens."
    )
    set_recall(results, "hybrid", "4096", 0.91)
    assert sentence(results, "within 5 points") == (
        "The cheapest run within 5 points of the best (full with no budget: 95.0%, 20,000 "
        "tokens a question) is hybrid at 4,096 tokens: 91.0% for 3,700 tokens a question, "
        "5.4× fewer tokens."
    )


def test_where_more_budget_stops_paying() -> None:
    results = typical()
    assert sentence(results, "tokens on") == (
        "From 4,096 tokens on, more budget adds less than 2 points for hybrid (82.0% → 83.0% "
        "at 16,384)."
    )
    assert sentence(results, "still gains") == (
        "From 4,096 to 16,384 tokens token_window still gains 30.0 points."
    )
    set_recall(results, "hybrid", "16384", 0.90)
    assert not any("tokens on" in s for s in findings(results))
    assert sentence(results, "still gains") == (
        "From 4,096 to 16,384 tokens token_window still gains 30.0 points and hybrid 8.0."
    )


def replayed(results: dict[str, Any]) -> dict[str, Any]:
    for strategy, usd, cached in (("token_window", 0.006, 0.05), ("hybrid", 0.002, 0.66)):
        results["results"][strategy]["16384"]["replay"] = {
            "turns": 120, "cached_share": cached, "input_usd_per_turn": usd,
        }  # fmt: skip
    return results


def test_the_prompt_cache_with_replay() -> None:
    assert not any("prompt cache" in s for s in findings(typical()))
    results = replayed(typical())
    assert sentence(results, "prompt cache") == (
        "Replayed turn by turn with the prompt cache at 16,384 tokens, hybrid pays $0.00200 a "
        "turn (66% of its input from the cache), token_window $0.00600 (5%): 3.0× as much, for "
        "83.0% of the evidence against 60.0%."
    )
    results["results"]["token_window"]["16384"]["replay"]["input_usd_per_turn"] = 0.008
    assert "token_window $0.00800 (5%): 4.0× as much" in sentence(results, "prompt cache")


def with_categories(results: dict[str, Any], budget: str, **by_strategy: float) -> None:
    """Give every run categories; at ``budget`` set "temporal" recall per strategy."""
    for strategy, per_budget in results["results"].items():
        for key, metrics in per_budget.items():
            temporal = by_strategy.get(strategy) if key == budget else None
            recall = metrics["evidence_recall"] if temporal is None else temporal
            metrics["by_category"] = {
                "single-hop": {"evidence_recall": metrics["evidence_recall"], "n": 30},
                "temporal": {"evidence_recall": recall, "n": 12},
            }


def test_a_category_where_the_leader_falls_behind() -> None:
    results = typical()
    with_categories(results, "4096", hybrid=0.25, token_window=0.5)
    assert sentence(results, "falls behind") == (
        "hybrid leads at 4,096 tokens but falls behind on temporal (12 questions): 25.0% "
        "against 50.0% for token_window."
    )
    with_categories(results, "4096", hybrid=0.25, token_window=0.21)
    assert not any("falls behind" in s for s in findings(results))


def test_without_such_a_category_the_leaders_weakest_one() -> None:
    results = typical()
    with_categories(results, "16384", hybrid=0.5, token_window=0.1)
    assert sentence(results, "weakest") == (
        "hybrid's weakest category at 16,384 tokens is temporal: 50.0% against 83.0% overall."
    )
    with_categories(results, "16384", hybrid=0.81, token_window=0.1)
    assert not any("weakest" in s for s in findings(results))


def test_contexts_over_their_budget() -> None:
    results = typical()
    assert not any("Over budget" in s for s in findings(results))
    results["results"]["token_window"]["1024"]["over_budget_rate"] = 0.05
    results["results"]["token_window"]["4096"]["over_budget_rate"] = 0.125
    assert sentence(results, "Over budget") == (
        "Over budget, at worst: token_window in 12.5% of its contexts at 4,096 tokens."
    )


def test_strategies_that_leave_out_the_last_messages() -> None:
    results = typical()
    for per_budget in results["results"].values():
        for metrics in per_budget.values():
            metrics.update(recent_recall=1.0, recent_all=1.0)
    results["results"]["hybrid"]["1024"]["recent_recall"] = 0.991  # not below 0.99
    assert not any("last 4 messages" in s for s in findings(results))
    results["results"]["token_window"]["1024"].update(recent_recall=0.95, recent_all=0.9)
    results["results"]["token_window"]["4096"].update(recent_recall=0.875, recent_all=0.75)
    results["results"]["full"]["unbounded"].update(recent_recall=0.98, recent_all=0.96)
    assert sentence(results, "last 4 messages") == (
        "Not every context has the last 4 messages before its question: token_window keeps "
        "87.5% of them at 4,096 tokens (all 4 in 75.0% of its contexts) and full keeps 98.0% "
        "of them with no budget (all 4 in 96.0% of its contexts)."
    )


def test_the_findings_count_the_messages_the_runner_counts() -> None:
    from ctxwindow.eval.report.findings import RECENT
    from ctxwindow.eval.runner import RECENT as COUNTED

    assert RECENT == COUNTED


def test_the_best_answers_when_scored() -> None:
    results = typical()
    results["results"]["hybrid"]["4096"]["answer_score"] = 0.71
    results["results"]["full"]["unbounded"]["answer_score"] = 0.65
    assert sentence(results, "answers") == (
        "Scored by the model, the best answers come from hybrid at 4,096 tokens (0.71)."
    )


def test_one_run_alone_still_says_something() -> None:
    results = results_of({"hybrid": {"2048": (0.5, 1800)}})
    assert findings(results) == [
        "hybrid at 2,048 tokens keeps every evidence message of 50.0% of the questions, for "
        "1,800 tokens a question."
    ]
    assert findings({"results": {}}) == []


@pytest.mark.parametrize(
    ("strategy", "budget"),
    [("hybrid", "1024"), ("hybrid", "16384"), ("token_window", "16384"), ("full", "unbounded")],
)
def test_every_recall_is_read(strategy: str, budget: str) -> None:
    """Moving any one run's recall changes what the findings say."""
    before = typical()
    after = copy.deepcopy(before)
    recall = before["results"][strategy][budget]["evidence_recall"]
    set_recall(after, strategy, budget, round(recall - 0.07, 6))
    assert findings(after) != findings(before)


def test_the_page_shows_the_findings_first_with_names_in_bold() -> None:
    results = typical()
    results["results"]["<i>mine</i>"] = results["results"].pop("token_window")
    page = render_html(results)
    assert page.index("<h2 id=findings>Findings</h2>") < page.index("<h2 id=results>")
    items = re.findall(r"<li>(.*?)</li>", page.split("<ul class=findings>")[1].split("</ul>")[0])
    assert len(items) == len(findings(results))
    assert items[0].startswith("<b>hybrid</b> keeps the most evidence at every budget")
    assert "<b>&lt;i&gt;mine&lt;/i&gt;</b>" in page and "<i>mine</i>" not in page
    assert "<b>full</b> with no budget" in page
