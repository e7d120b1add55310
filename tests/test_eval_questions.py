"""Per-question outcomes: what the runner records in results.json, and the page's table."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from ctxwindow.eval import Built, Case, Strategy, register_strategy, unregister_strategy
from ctxwindow.eval.loaders import load_dataset
from ctxwindow.eval.report import render_html, results_json
from ctxwindow.eval.report.questions import OUTCOMES as MARKS
from ctxwindow.eval.runner import OUTCOMES, run_eval

from .support.eval_data import conversation, dataset

# What the scripted strategy does with each question of test_eval.conversation():
# the evidence ids it keeps whole, those it keeps compressed, whether the answer survives
# in their compressed form.
SCRIPT = {
    "early": ({"m1"}, set(), False),  # m1 kept whole: kept
    "late": (set(), {"m18"}, True),  # m18 compressed, the answer in it: compressed
    "both": ({"m2"}, set(), False),  # m2 of m2 + m17: partly lost
    "mid": (set(), {"m5"}, False),  # m5 compressed, answer cut: lost
}


class Scripted(Strategy):
    """Builds, for each question, exactly what ``SCRIPT`` says: the compressed evidence
    is one summary message, which has the answer or not."""

    name = "scripted"

    def start(self, budget: int | None, tokenizer: Any) -> Any:
        return None

    def ingest(self, state: Any, message_id: str, message: Any) -> None:
        pass

    def build(self, state: Any, case: Case) -> Built:
        whole, compressed, answer_kept = SCRIPT[case.question.id]
        text = f"a summary: {case.question.answer if answer_kept else 'nothing useful'}"
        messages = [{"role": "user", "content": text}, case.prompt]
        sent_as = dict.fromkeys(compressed, text)
        return Built(messages, frozenset(whole), frozenset(compressed), sent_as)


@pytest.fixture
def scripted() -> Any:
    register_strategy("scripted", Scripted)
    yield "scripted"
    unregister_strategy("scripted")


def test_each_outcome_letter_says_what_became_of_the_evidence(scripted: str) -> None:
    results = run_eval(dataset(conversation()), strategies=[scripted], budgets=[1000])
    run = results["results"]["scripted"]["1000"]
    # File order, though "mid" is asked first (after m9).
    assert [q["id"] for q in results["questions"]] == ["early", "late", "both", "mid"]
    assert run["outcomes"] == "kcpl"
    assert run["evidence_recall"] == 0.5  # kept, and compressed with the answer in it
    assert run["evidence_recall_whole"] == 0.25  # kept only
    assert run["turn_recall"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert set(OUTCOMES) == set("kcpl") == set(MARKS)  # the page reads the runner's letters
    legend = render_html(results).split("<h2 id=questions>")[1]
    assert "the answer in the compressed form of the evidence" in legend


def test_the_question_list_names_each_question_once(scripted: str) -> None:
    data = dataset(conversation("c1"), conversation("c2", 25))
    results = run_eval(data, strategies=[scripted, "full"], budgets=[1000])
    questions = results["questions"]
    assert len(questions) == results["n_questions"] == 8
    assert questions[0] == {
        "conversation": "c1", "id": "early", "category": "single-hop",
        "question": "What is the code of fact 1?", "answer": "K001", "evidence": ["m1"],
    }  # fmt: skip
    assert [(q["conversation"], q["id"]) for q in questions[3:5]] == [
        ("c1", "mid"),
        ("c2", "early"),
    ]
    assert results["results"]["scripted"]["1000"]["outcomes"] == "kcpl" * 2
    assert results["results"]["full"]["unbounded"]["outcomes"] == "k" * 8
    json.dumps(results)


@pytest.fixture(scope="module")
def builtin_results() -> dict[str, Any]:
    data, _ = load_dataset("builtin:all?turns=20")
    return run_eval(data, strategies=["token_window", "hybrid", "full"], budgets=[512, 2048])


@pytest.mark.slow  # builtin_results embeds the built-in datasets for the hybrid: ~60 s
def test_outcomes_agree_with_the_recall_they_sum_up(builtin_results: dict[str, Any]) -> None:
    """Evidence recall, overall and by category, is the share of "k" and "c" letters."""
    questions = builtin_results["questions"]
    for per_budget in builtin_results["results"].values():
        for metrics in per_budget.values():
            outcomes = metrics["outcomes"]
            assert len(outcomes) == len(questions) and set(outcomes) <= set("kcpl")
            kept = [letter in "kc" for letter in outcomes]
            assert metrics["evidence_recall"] == pytest.approx(sum(kept) / len(kept), abs=1e-6)
            for category, row in metrics["by_category"].items():
                mine = [
                    k for k, q in zip(kept, questions, strict=True) if q["category"] == category
                ]
                assert row["n"] == len(mine)
                assert row["evidence_recall"] == pytest.approx(sum(mine) / len(mine), abs=1e-6)
    assert set(builtin_results["results"]["hybrid"]["512"]["outcomes"]) > {"k"}


@pytest.mark.slow  # builtin_results embeds the built-in datasets for the hybrid: ~60 s
def test_the_page_has_a_row_per_question_and_a_column_per_run(
    builtin_results: dict[str, Any],
) -> None:
    page = render_html(builtin_results)
    rows = re.findall(r"<tr data-category='([^']*)' data-outcomes='([^']*)'>", page)
    assert len(rows) == len(builtin_results["questions"])
    columns = [
        metrics["outcomes"]
        for per_budget in builtin_results["results"].values()
        for metrics in per_budget.values()
    ]
    for i, (category, letters) in enumerate(rows):
        assert category == builtin_results["questions"][i]["category"]
        assert letters == "".join(column[i] for column in columns)
    options = re.findall(r"<option value='(\d+)'>([^<]*)</option>", page)
    assert [label for _, label in options] == [
        "token_window at 512", "token_window at 2,048", "hybrid at 512", "hybrid at 2,048",
        "full, no budget",
    ]  # fmt: skip
    assert "<label for=q-search>" in page and "<label for=q-outcome>" in page


def test_question_text_is_escaped() -> None:
    results = {
        "results": {"full": {"unbounded": {"evidence_recall": 1.0, "mean_tokens": 10.0,
                                           "outcomes": "k"}}},
        "questions": [{"conversation": "c'1", "id": "q<1>", "category": "x' onmouseover='y",
                       "question": "<script>alert(1)</script>", "answer": "A & B"}],
    }  # fmt: skip
    page = render_html(results)
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "data-category='x&#x27; onmouseover=&#x27;y'" in page
    assert "A &amp; B" in page


def test_results_without_questions_have_no_table() -> None:
    """results.json files from before per-question outcomes still make a report."""
    results = {"results": {"full": {"unbounded": {"evidence_recall": 1.0, "mean_tokens": 10.0}}}}
    page = render_html(results)
    assert "Question by question" not in page and "<script>" not in page
    results["questions"] = [{"id": "q1"}]
    results["results"]["full"]["unbounded"]["outcomes"] = "kk"  # not one letter a question
    assert "Question by question" not in render_html(results)


def test_the_per_question_data_stays_compact_at_benchmark_size() -> None:
    """LoCoMo's dev file: 758 questions × 5 strategies × 5 budgets. The outcomes add one
    byte a question a run; the rest is the question list, written once."""
    n, letters = 758, "kkcplk"
    questions = [
        {"conversation": f"conv-{i % 5}", "id": f"conv-{i % 5}:q{i}", "category": "single-hop",
         "question": "When did Caroline go to the LGBTQ support group?" , "answer": "7 May 2023",
         "evidence": ["D1:3"]}
        for i in range(n)
    ]  # fmt: skip
    outcomes = "".join(letters[i % len(letters)] for i in range(n))
    results = {
        "questions": questions,
        "results": {
            f"strategy_{s}": {
                str(1024 << b): {"evidence_recall": 0.5, "mean_tokens": 900.0 * (1 << b),
                                 "outcomes": outcomes}
                for b in range(5)
            }
            for s in range(5)
        },
    }  # fmt: skip
    text = results_json(results)
    assert json.loads(text) == results
    assert len(text) - len(results_json({"results": results["results"]})) < 190 * n
    assert text.count("\n") < 300 + n  # a line a question
    page = render_html(results)
    assert len(page.encode()) < 1_500_000
    assert Counter(re.findall(r"<td class='o (\w)'>", page))["k"] == 25 * outcomes.count("k")
