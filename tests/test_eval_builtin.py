"""Built-in evaluation datasets: deterministic, well formed, sized, in English and Chinese."""

from __future__ import annotations

import doctest
import functools
import hashlib
import itertools
import json
import os
import random
import re
import subprocess
import sys
from typing import Any

import pytest

from ctxwindow import count_tokens
from ctxwindow.eval import builtin
from ctxwindow.eval.builtin import (
    BUILTIN,
    LANGUAGES,
    PARAMETERS,
    builtin_dataset,
    builtin_names,
    generate_agent,
    generate_orders,
)

CASES = [(scenario, lang) for scenario in BUILTIN for lang in LANGUAGES]
CATEGORIES = {
    "orders": {"single-hop"},
    "manual": {"document", "single-hop"},
    "agent": {"tool-result"},
    "persona": {"single-hop", "multi-hop"},
}
CJK = re.compile(r"[\u4e00-\u9fff]")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

Conversation = dict[str, Any]


@functools.cache
def default(scenario: str, lang: str) -> Conversation:
    """The default conversation of a scenario (cached: tests must not change it)."""
    conversation: Conversation = BUILTIN[scenario](lang)["conversations"][0]
    return conversation


def wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k not in ("id", "timestamp")} for m in messages]


def text_of(message: dict[str, Any]) -> str:
    return message.get("content") or json.dumps(message.get("tool_calls"), ensure_ascii=False)


def check_tool_units(messages: list[dict[str, Any]]) -> None:
    """Each tool call is followed at once by all of its results, and results by nothing else."""
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"{message['id']}: tool result without its call"
        calls = [call["id"] for call in message.get("tool_calls") or []]
        results = messages[i + 1 : i + 1 + len(calls)]
        assert [m["role"] for m in results] == ["tool"] * len(calls), message["id"]
        assert sorted(m["tool_call_id"] for m in results) == sorted(calls), message["id"]
        i += 1 + len(calls)


def check_conversation(conversation: Conversation) -> None:
    messages = conversation["messages"]
    ids = [m["id"] for m in messages]
    assert len(set(ids)) == len(ids), "message ids are unique"
    stamps = [m["timestamp"] for m in messages]
    assert all(TIMESTAMP.fullmatch(stamp) for stamp in stamps)
    assert all(a < b for a, b in itertools.pairwise(stamps)), "timestamps increase"
    check_tool_units(messages)
    position = {mid: i for i, mid in enumerate(ids)}
    questions = conversation["questions"]
    assert len({q["id"] for q in questions}) == len(questions), "question ids are unique"
    for q in questions:
        assert q["question"].strip() and q["answer"].strip()
        assert q["evidence"] and all(e in position for e in q["evidence"]), q
        if "after" in q:
            at = position[q["after"]]
            assert at >= max(position[e] for e in q["evidence"]), q
            assert "tool_calls" not in messages[at], "asked between a call and its results"
            assert at + 1 == len(messages) or messages[at + 1]["role"] != "tool", q


@pytest.mark.parametrize(("scenario", "lang"), CASES)
def test_same_seed_gives_the_same_dataset(scenario: str, lang: str) -> None:
    first = BUILTIN[scenario](lang, turns=20, seed=7)
    again = BUILTIN[scenario](lang, turns=20, seed=7)
    assert json.dumps(first, ensure_ascii=False) == json.dumps(again, ensure_ascii=False)


@pytest.mark.parametrize(("scenario", "lang"), CASES)
def test_another_seed_gives_another_dataset(scenario: str, lang: str) -> None:
    assert BUILTIN[scenario](lang, turns=20, seed=1) != BUILTIN[scenario](lang, turns=20, seed=2)


def test_same_spec_gives_the_same_dataset_in_another_process() -> None:
    """Nothing depends on hash randomization or on state left by earlier calls."""
    spec = "all?turns=4&seed=11"
    script = (
        "import hashlib, json, sys; from ctxwindow.eval.builtin import builtin_dataset; "
        "data = json.dumps(builtin_dataset(sys.argv[1]), ensure_ascii=False); "
        "print(hashlib.sha256(data.encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4321"}
    run = subprocess.run(
        [sys.executable, "-c", script, spec], capture_output=True, text=True, env=env, check=True
    )
    here = json.dumps(builtin_dataset(spec), ensure_ascii=False)
    assert run.stdout.strip() == hashlib.sha256(here.encode()).hexdigest()


def test_generators_leave_the_global_random_state_alone() -> None:
    state = random.getstate()
    for scenario, lang in CASES:
        BUILTIN[scenario](lang, turns=3)
    assert random.getstate() == state


@pytest.mark.parametrize(("scenario", "lang"), CASES)
def test_default_conversation_is_well_formed(scenario: str, lang: str) -> None:
    conversation = default(scenario, lang)
    assert conversation["id"] == f"{scenario}-{lang}-0"
    check_conversation(conversation)
    assert any("after" in q for q in conversation["questions"]), "some are asked mid-way"


@pytest.mark.parametrize("turns", [0, 1, 7])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("scenario", "lang"), CASES)
def test_small_conversations_are_well_formed(
    scenario: str, lang: str, seed: int, turns: int
) -> None:
    for conversation in BUILTIN[scenario](lang, turns=turns, filler=5, seed=seed)["conversations"]:
        check_conversation(conversation)


@pytest.mark.parametrize(("scenario", "lang"), CASES)
def test_evidence_holds_the_answer(scenario: str, lang: str) -> None:
    """Single-hop answers are in their evidence; multi-hop ones need two or more messages."""
    conversation = default(scenario, lang)
    messages = {m["id"]: m for m in conversation["messages"]}
    for q in conversation["questions"]:
        evidence = [text_of(messages[e]) for e in q["evidence"]]
        if q["category"] == "multi-hop":
            assert len(evidence) >= 2
            assert q["answer"] in evidence[-1], q
        else:
            assert any(q["answer"] in text for text in evidence), q


@pytest.mark.parametrize("lang", LANGUAGES)
def test_restaurant_question_needs_the_city_the_allergy_and_the_list(lang: str) -> None:
    """The answer is listed under the user's city, which only the city statement names."""
    conversation = persona_with_restaurant_question(lang)
    messages = {m["id"]: m for m in conversation["messages"]}
    (q,) = (q for q in conversation["questions"] if len(q["evidence"]) == 3)
    city, allergy, listing = (messages[e] for e in q["evidence"])
    assert [city["role"], allergy["role"], listing["role"]] == ["user", "user", "assistant"]
    line = next(line for line in listing["content"].splitlines() if q["answer"] in line)
    match = re.search(r"[(（](.+?)[)）]", line)
    assert match is not None
    assert match.group(1) in city["content"]
    assert match.group(1) not in allergy["content"]


def persona_with_restaurant_question(lang: str) -> Conversation:
    """A small persona conversation that asks the restaurant question (not every seed does)."""
    for seed in range(20):
        data = BUILTIN["persona"](lang, turns=5, seed=seed)
        conversation: Conversation = data["conversations"][0]
        if any(len(q["evidence"]) == 3 for q in conversation["questions"]):
            return conversation
    raise AssertionError("no seed below 20 asks the restaurant question")


@pytest.mark.parametrize(("scenario", "lang"), CASES)
def test_default_size_and_questions(scenario: str, lang: str) -> None:
    conversation = default(scenario, lang)
    tokens = count_tokens(wire(conversation["messages"]), model="gpt-4o")
    assert 10_000 <= tokens <= 30_000
    questions = conversation["questions"]
    assert 4 <= len(questions) <= 8
    assert {q["category"] for q in questions} == CATEGORIES[scenario]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_agent_tool_results_are_long_json(lang: str) -> None:
    conversation = generate_agent(lang, seed=3)["conversations"][0]
    results = [m for m in conversation["messages"] if m["role"] == "tool"]
    assert len(results) >= 10
    for message in results:
        assert isinstance(json.loads(message["content"]), dict)
        assert 500 <= count_tokens(wire([message])) <= 2_000
    for q in conversation["questions"]:
        assert [conversation["messages"][int(e[1:])]["role"] for e in q["evidence"]] == ["tool"]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_manual_questions_point_at_one_long_pasted_message(lang: str) -> None:
    conversation = default("manual", lang)
    documents = {
        e for q in conversation["questions"] if q["category"] == "document" for e in q["evidence"]
    }
    (manual,) = (m for m in conversation["messages"] if m["id"] in documents)
    assert manual["role"] == "user"
    assert count_tokens(wire([manual])) >= 3_000


@pytest.mark.parametrize("scenario", sorted(BUILTIN))
def test_chinese_variants_are_written_in_chinese(scenario: str) -> None:
    conversation = default(scenario, "zh")
    texts = [m["content"] for m in conversation["messages"] if m["role"] in ("user", "assistant")]
    texts = [t for t in texts if t]
    assert sum(bool(CJK.search(t)) for t in texts) >= 0.95 * len(texts)
    assert all(CJK.search(q["question"]) for q in conversation["questions"])


@pytest.mark.parametrize("scenario", sorted(BUILTIN))
def test_english_variants_have_no_chinese(scenario: str) -> None:
    conversation = default(scenario, "en")
    assert not CJK.search(json.dumps(conversation, ensure_ascii=False))


def test_all_has_every_scenario_in_both_languages() -> None:
    data = builtin_dataset("all?turns=3")
    ids = [c["id"] for c in data["conversations"]]
    assert len(ids) == 8
    assert set(ids) == {f"{scenario}-{lang}-0" for scenario, lang in CASES}


def test_all_keeps_ids_unique_with_several_conversations() -> None:
    ids = [c["id"] for c in builtin_dataset("all?turns=1&conversations=2")["conversations"]]
    assert len(ids) == len(set(ids)) == 16


def test_spec_parameters_reach_the_generator() -> None:
    spec = "orders-zh?turns=5&filler=30&seed=3&conversations=2"
    expected = generate_orders("zh", turns=5, filler=30, seed=3, conversations=2)
    assert builtin_dataset(spec) == expected
    assert builtin_dataset("builtin:" + spec) == expected


def test_a_bare_name_is_english() -> None:
    assert builtin_dataset("agent?turns=2") == generate_agent("en", turns=2)
    assert builtin_dataset("agent-en?turns=2") == generate_agent("en", turns=2)


def test_more_conversations_leave_the_first_unchanged() -> None:
    one = generate_orders(turns=4)["conversations"]
    three = generate_orders(turns=4, conversations=3)["conversations"]
    assert three[0] == one[0]
    assert [c["id"] for c in three] == ["orders-en-0", "orders-en-1", "orders-en-2"]
    assert three[1]["messages"] != three[2]["messages"]


def test_names_list_every_scenario_and_language() -> None:
    names = builtin_names()
    assert names[0] == "all"
    assert {f"{s}-{lang}" for s, lang in CASES} <= set(names)
    assert set(BUILTIN) <= set(names)


@pytest.mark.parametrize("spec", ["nope", "orders-fr", "orders_zh", "", "all-zh", "?turns=3"])
def test_an_unknown_name_lists_the_valid_ones(spec: str) -> None:
    with pytest.raises(ValueError, match="valid names") as caught:
        builtin_dataset(spec)
    assert all(name in str(caught.value) for name in builtin_names())


@pytest.mark.parametrize("spec", ["orders?bogus=1", "orders?turns=3&size=2", "all?Seed=1"])
def test_an_unknown_parameter_lists_the_valid_ones(spec: str) -> None:
    with pytest.raises(ValueError, match="valid parameters") as caught:
        builtin_dataset(spec)
    assert all(name in str(caught.value) for name in PARAMETERS)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("orders?turns=many", "integer"),
        ("orders?turns", "integer"),
        ("orders?turns=1.5", "integer"),
        ("orders?seed=1&seed=2", "twice"),
        ("orders?conversations=0", "conversations must be at least 1"),
        ("orders?turns=-1", "turns must be at least 0"),
        ("orders?filler=0", "filler must be at least 1"),
    ],
)
def test_bad_parameter_values_are_rejected(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        builtin_dataset(spec)


def test_an_unknown_language_is_rejected_by_the_generator() -> None:
    with pytest.raises(ValueError, match="en, zh"):
        generate_orders("fr")


def test_the_dataset_loader_accepts_every_builtin() -> None:
    dataset_module = pytest.importorskip("ctxwindow.eval.dataset")
    for scenario, lang in CASES:
        data = {"conversations": [default(scenario, lang)]}
        dataset, skipped = dataset_module.parse_dataset(data, f"builtin:{scenario}-{lang}")
        assert skipped == []
        assert dataset.n_questions == len(default(scenario, lang)["questions"])


def test_docstring_examples() -> None:
    assert doctest.testmod(builtin).failed == 0
