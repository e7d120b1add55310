"""``ctxwindow eval``: datasets, strategies with known answers, metrics, determinism."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import count_tokens
from ctxwindow.eval import (
    Case,
    DatasetError,
    Strategy,
    get_strategy,
    load_dataset,
    register_strategy,
    run_eval,
    strategy_names,
    unregister_strategy,
)
from ctxwindow.eval.dataset import parse_dataset
from ctxwindow.eval.runner import measure, percentile, summarize
from ctxwindow.tokens import chat_tokenizer
from tests.support.eval_data import broken, conversation, dataset

TIMING_KEYS = {"build_ms_p50", "build_ms_p99"}


def case(data: Any, qid: str) -> Case:
    conv = data.conversations[0]
    return Case(conv, next(q for q in conv.questions if q.id == qid))


# -- datasets -------------------------------------------------------------------


def test_json_and_jsonl_load_the_same(tmp_path: Path) -> None:
    convs = [conversation("a"), conversation("b")]
    (tmp_path / "d.json").write_text(json.dumps({"conversations": convs}), encoding="utf-8")
    lines = "\n".join(json.dumps(c, ensure_ascii=False) for c in convs)
    (tmp_path / "d.jsonl").write_text(lines + "\n", encoding="utf-8")
    from_json, _ = load_dataset(str(tmp_path / "d.json"))
    from_jsonl, _ = load_dataset(str(tmp_path / "d.jsonl"))
    assert from_json.conversations == from_jsonl.conversations
    assert from_json.n_questions == 8


def test_dataset_keys_are_not_sent_to_the_model() -> None:
    data = dataset(conversation())
    assert all("id" not in m and "timestamp" not in m for m in data.conversations[0].messages)


def test_after_cuts_the_history() -> None:
    history = case(dataset(conversation()), "mid").history
    assert [mid for mid, _ in history][-1] == "m9"
    assert len(history) == 11


@pytest.mark.parametrize(
    ("conv", "fragment"),
    [
        (broken(id=None), "needs a string 'id'"),
        (broken(messages=[]), "'messages' must be a non-empty list"),
        (broken(messages__3__id="m0"), "message 'm0': duplicate message id"),
        (broken(messages__2__role="robot"), "unknown role 'robot'"),
        (broken(messages__4__id=None), "needs a string 'id'"),
        (broken(questions__0__evidence=["m99"]), "question 'early': evidence ['m99'] not among"),
        (broken(questions__0__evidence=[]), "'evidence' must be a non-empty list"),
        (broken(questions__1__id="early"), "question 'early': duplicate question id"),
        (broken(questions__3__after="m3"), "evidence comes after 'm3'"),
        (broken(questions__3__after="nope"), "'after' 'nope' is not a message id"),
        (broken(questions__2__question=""), "needs a non-empty 'question'"),
    ],
)
def test_invalid_datasets_name_what_is_wrong(conv: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DatasetError) as info:
        parse_dataset({"conversations": [conv]}, "bad.json")
    assert fragment in str(info.value)
    assert str(info.value).startswith("bad.json: ")


def test_tool_results_must_follow_their_call() -> None:
    conv = conversation()
    call = {
        "id": "t0",
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    result = {"id": "t1", "role": "tool", "tool_call_id": "call_1", "content": "{}"}
    conv["messages"] += [result, call]  # result before its call, call never answered
    with pytest.raises(DatasetError) as info:
        parse_dataset({"conversations": [conv]}, "tools.json")
    assert "does not follow its call" in str(info.value)
    assert "have no results at the end" in str(info.value)  # fmt: skip


def test_duplicate_conversations_and_bad_json(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="duplicate conversation id"):
        parse_dataset({"conversations": [conversation(), conversation()]}, "dup")
    (tmp_path / "x.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_dataset(str(tmp_path / "x.json"))
    with pytest.raises(DatasetError, match="cannot read"):
        load_dataset(str(tmp_path / "missing.json"))


def test_skip_invalid_keeps_the_valid_rest() -> None:
    bad_question = broken(questions__0__evidence=["m99"])
    bad_question["id"] = "c2"
    bad_messages = broken(messages__2__role="robot")
    bad_messages["id"] = "c3"
    raw = {"conversations": [conversation(), bad_question, bad_messages]}
    with pytest.raises(DatasetError) as info:
        parse_dataset(raw, "mixed")
    assert len(info.value.problems) == 2
    data, problems = parse_dataset(raw, "mixed", skip_invalid=True)
    assert [c.id for c in data.conversations] == ["c1", "c2"]
    assert [len(c.questions) for c in data.conversations] == [4, 3]
    assert len(problems) == 2


# -- strategies, where the right answer is known ------------------------------------


def built_ids(name: str, budget: int | None, data: Any, qid: str) -> list[str]:
    strategy = get_strategy(name)
    tokenizer = chat_tokenizer("gpt-4o")
    the_case = case(data, qid)
    if budget is not None:
        strategy.calibrate(
            [case(data, q.id) for q in data.conversations[0].questions], budget, tokenizer
        )
    built = strategy.build(strategy.prepare(the_case, budget, tokenizer), the_case)
    assert built.messages[-1] == the_case.prompt
    order = [mid for mid, _ in the_case.history]
    return sorted(built.kept_ids, key=order.index)


def test_full_keeps_everything_seen() -> None:
    data = dataset(conversation())
    assert built_ids("full", None, data, "late") == ["sys"] + [f"m{i}" for i in range(20)]
    assert built_ids("full", None, data, "mid") == ["sys"] + [f"m{i}" for i in range(10)]


def test_message_window_of_k_messages_keeps_exactly_the_last_k() -> None:
    data = dataset(conversation())
    strategy = get_strategy("message_window")
    tokenizer = chat_tokenizer("gpt-4o")
    cases = [case(data, q.id) for q in data.conversations[0].questions]
    for budget in (60, 120, 250, 10_000):
        n = strategy.calibrate(cases, budget, tokenizer)["messages"]
        the_case = case(data, "late")
        built = strategy.build(strategy.prepare(the_case, budget, tokenizer), the_case)
        expected = ["sys", *[f"m{i}" for i in range(20)][max(20 - (n - 1), 0) :]]
        order = [mid for mid, _ in the_case.history]
        assert sorted(built.kept_ids, key=order.index) == (expected if n > 1 else ["sys"])
        # the system prompt does not count; the question is one of the n
        assert len(built.messages) == min(n, 21) + 1


def test_message_window_n_is_the_largest_whose_mean_fits() -> None:
    data = dataset(conversation())
    tokenizer = chat_tokenizer("gpt-4o")
    cases = [case(data, q.id) for q in data.conversations[0].questions]

    def mean_size(k: int) -> float:  # oracle: build each context by hand and count it
        sizes = []
        for c in cases:
            history = [m for _, m in c.history]
            rest = history[1:]
            kept = rest[max(len(rest) - (k - 1), 0) :] if k > 1 else []
            sizes.append(count_tokens([history[0], *kept, c.prompt]))
        return sum(sizes) / len(sizes)

    for budget in (100, 200, 300):
        n = get_strategy("message_window").calibrate(cases, budget, tokenizer)["messages"]
        assert mean_size(n) <= budget < mean_size(n + 1)


def test_token_window_keeps_the_longest_suffix_that_fits() -> None:
    data = dataset(conversation())
    the_case = case(data, "late")
    history = [m for _, m in the_case.history]
    for budget in (80, 150, 400):
        kept = built_ids("token_window", budget, data, "late")
        k = len(kept) - 1  # without the system prompt
        fits = count_tokens([history[0], *history[len(history) - k :], the_case.prompt])
        more = count_tokens([history[0], *history[len(history) - k - 1 :], the_case.prompt])
        assert fits <= budget < more


def test_run_eval_metrics_on_a_known_dataset() -> None:
    data = dataset(conversation())
    results = run_eval(data, budgets=[150, 100_000])
    full = results["results"]["full"]["unbounded"]
    assert full["evidence_recall"] == 1.0 and full["turn_recall"] == 1.0
    big = results["results"]["token_window"]["100000"]
    assert big["evidence_recall"] == 1.0 and big["over_budget_rate"] == 0.0
    assert big["mean_tokens"] == full["mean_tokens"]
    small = results["results"]["token_window"]["150"]
    # at 150 tokens only the last few facts fit: "late" (m18) yes, "early" and "both" no;
    # "mid" is asked after m9 and its evidence m5 is 4 messages back.
    kept_late = built_ids("token_window", 150, data, "late")
    assert "m18" in kept_late and "m1" not in kept_late and "m2" not in kept_late
    expected = (
        sum(
            all(e in built_ids("token_window", 150, data, q.id) for e in q.evidence)
            for q in data.conversations[0].questions
        )
        / 4
    )
    assert small["evidence_recall"] == expected
    assert small["turn_recall"] >= small["evidence_recall"]
    assert small["by_category"]["multi-hop"]["n"] == 1
    assert small["by_category"]["single-hop"]["n"] == 3
    price = 2.50 / 1e6
    assert small["mean_cost_usd"] == pytest.approx(small["mean_tokens"] * price)
    assert small["mean_tokens"] <= 150


def test_results_follow_the_design_schema() -> None:
    results = run_eval(dataset(conversation()), budgets=[512, 1024])
    assert {"model", "dataset", "results"} <= set(results)
    for per_budget in results["results"].values():
        for metrics in per_budget.values():
            assert isinstance(metrics["evidence_recall"], float)
            assert isinstance(metrics["turn_recall"], float)
            assert isinstance(metrics["mean_tokens"], float)
            assert isinstance(metrics["build_ms_p50"], float)
            assert isinstance(metrics["n"], int)
    assert set(results["results"]["token_window"]) == {"512", "1024"}
    assert set(results["results"]["full"]) == {"unbounded"}
    json.dumps(results)  # serializable as is


def without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    return value


def test_same_inputs_give_the_same_numbers() -> None:
    first = run_eval(dataset(conversation(), conversation("c2", 30)), budgets=[100, 300])
    second = run_eval(dataset(conversation(), conversation("c2", 30)), budgets=[100, 300])
    assert without_timings(first) == without_timings(second)


def test_unknown_strategy_and_bad_budgets_fail_before_measuring() -> None:
    with pytest.raises(ValueError, match=r"known strategies: .*message_window"):
        run_eval(dataset(conversation()), strategies=["nope"])
    with pytest.raises(ValueError, match="positive integers"):
        run_eval(dataset(conversation()), budgets=[0])


def test_a_user_strategy_plugs_in() -> None:
    class LastTwo(Strategy):
        name = "last_two"

        def start(self, budget: int | None, tokenizer: Any) -> Any:
            return []

        def ingest(self, state: Any, message_id: str, message: Any) -> None:
            state.append((message_id, message))

        def build(self, state: Any, case: Case) -> Any:
            from ctxwindow.eval import Built

            last = state[-2:]
            return Built([m for _, m in last] + [case.prompt], frozenset(i for i, _ in last))

    register_strategy("last_two", LastTwo)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_strategy("last_two", LastTwo)
        results = run_eval(dataset(conversation()), strategies=["last_two"], budgets=[1000])
    finally:
        unregister_strategy("last_two")
    # only "late" has its evidence (m18) among the last two messages it saw
    assert results["results"]["last_two"]["1000"]["evidence_recall"] == 0.25
    assert "last_two" not in strategy_names()


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile(list(map(float, range(101))), 99) == 99.0


def long_document_conversation() -> dict[str, Any]:
    """A pasted manual with one key fact, then chatter, then a question about the fact."""
    manual = " ".join(
        f"Section {i}: the device has many ordinary features described at length here."
        for i in range(120)
    )
    manual += " The reset code is RST-9921. " + manual
    messages: list[dict[str, Any]] = [
        {"id": "sys", "role": "system", "content": "Be brief."},
        {"id": "doc", "role": "user", "content": "Here is the manual: " + manual},
    ]
    for i in range(30):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"id": f"t{i}", "role": role, "content": f"small turn {i} about delivery"})
    question = {"id": "q", "question": "What is the reset code?", "answer": "RST-9921",
                "evidence": ["doc"], "category": "document"}  # fmt: skip
    return {"id": "doc1", "messages": messages, "questions": [question]}


def test_hybrid_is_registered_and_keeps_the_budget() -> None:
    data = dataset(conversation(), long_document_conversation())
    results = run_eval(
        data, strategies=["token_window", "hybrid", "hybrid_nosummary"], budgets=[300, 1500]
    )
    for name in ("hybrid", "hybrid_nosummary"):
        for budget in ("300", "1500"):
            metrics = results["results"][name][budget]
            assert metrics["over_budget_rate"] == 0.0
            assert metrics["mean_tokens"] <= int(budget)
    # the pasted manual is larger than a 1,500-token window: a token window drops
    # it, the hybrid compresses it and keeps the reset code only if it survived
    token = results["results"]["token_window"]["1500"]["by_category"]["document"]
    assert token["evidence_recall"] == 0.0


def test_compressed_evidence_counts_only_if_the_answer_survived_in_it() -> None:
    """The hybrid says which message of the context is the manual's compressed form (here
    the rolling summary it was folded into); the answer counts only if it is in that
    message, not merely somewhere in the context."""
    data = dataset(long_document_conversation())
    the_case = case(data, "q")
    tokenizer = chat_tokenizer("gpt-4o")
    strategy = get_strategy("hybrid")
    built = strategy.build(strategy.prepare(the_case, 1500, tokenizer), the_case)
    assert "doc" in built.compressed_ids and "doc" not in built.kept_ids
    sent_as = built.compressed_text["doc"]
    manual = str(the_case.conversation.messages[1]["content"])
    assert sent_as in [m.get("content") for m in built.messages]
    assert len(sent_as) < len(manual)
    survived = "RST-9921" in sent_as
    results = run_eval(data, strategies=["hybrid"], budgets=[1500])
    assert results["results"]["hybrid"]["1500"]["evidence_recall"] == (1.0 if survived else 0.0)
    assert results["results"]["hybrid"]["1500"]["evidence_recall_whole"] == 0.0


def _without_timings(results: dict[str, Any]) -> dict[str, Any]:
    timed = ("build_ms_p50", "build_ms_p99")
    return {
        name: {
            label: {k: v for k, v in row.items() if k not in timed} for label, row in rows.items()
        }
        for name, rows in results["results"].items()
    }


@pytest.mark.slow  # every strategy, budget and question twice: minutes
def test_ingesting_once_gives_what_ingesting_per_question_gives() -> None:
    """The shared, read-only path equals the from-scratch reference, result for result."""
    data, _ = load_dataset("builtin:all?turns=30")
    names = ["message_window", "token_window", "hybrid", "hybrid_norecall", "full"]
    budgets = [512, 1536]
    shared = run_eval(data, strategies=names, budgets=budgets)
    tokenizer = chat_tokenizer("gpt-4o")
    cases = [Case(c, q) for c in data.conversations for q in c.questions]
    for name in names:
        strategy = get_strategy(name)
        for budget in budgets if strategy.budgeted else [None]:
            facts = strategy.calibrate(cases, budget, tokenizer) if budget is not None else {}
            alone = [measure(strategy, case, budget, tokenizer) for case in cases]
            label = "unbounded" if budget is None else str(budget)
            row = {**summarize(alone, budget, shared["input_price_per_mtok"]), **facts}
            assert _without_timings({"results": {name: {label: row}}}) == {
                name: {label: _without_timings(shared)[name][label]}
            }


@pytest.mark.slow  # three strategies over a whole conversation: ~20 s
def test_a_build_changes_nothing_a_later_question_sees() -> None:
    data, _ = load_dataset("builtin:agent")
    conversation = data.conversations[0]
    tokenizer = chat_tokenizer("gpt-4o")
    for name in ["token_window", "hybrid", "hybrid_norecall"]:
        strategy = get_strategy(name)
        state = strategy.start(1024, tokenizer)
        for mid, message in zip(conversation.message_ids, conversation.messages, strict=True):
            strategy.ingest(state, mid, message)
        case = Case(conversation, conversation.questions[0])
        first = strategy.build(state, case)
        for question in conversation.questions[1:]:
            strategy.build(state, Case(conversation, question))
        assert strategy.build(state, case) == first


@pytest.mark.slow  # worker processes over the built-in datasets: 6-80 s, by the load
def test_workers_change_nothing_but_the_time() -> None:
    data, _ = load_dataset("builtin:all?turns=20")
    names = ["token_window", "hybrid", "full"]
    alone = run_eval(data, strategies=names, budgets=[512, 1024])
    forked = run_eval(data, strategies=names, budgets=[512, 1024], workers=2)
    assert _without_timings(forked) == _without_timings(alone)
