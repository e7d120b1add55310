"""Answer scoring through an OpenAI-compatible endpoint (a real HTTP server in-process)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow.eval import run_eval
from ctxwindow.eval.llm import LLMError, OpenAIAnswerer, match_score, normalize

from .support.eval_data import conversation, dataset
from .support.fake_llm import fake_llm


def test_normalize_and_match() -> None:
    assert normalize("  K-001, ok! ") == "k001ok"
    assert normalize("ＡＢＣ１２３") == "abc123"  # full-width folds (NFKC)
    assert match_score("The code is K001.", "k001") == 1.0
    assert match_score("答案是：东京。", "东京") == 1.0
    assert match_score("I don't know", "K001") == 0.0
    assert match_score("anything", "") == 0.0


@pytest.mark.parametrize("judge", [False, True])
def test_answers_are_scored_from_what_the_model_received(judge: bool) -> None:
    data = dataset(conversation())
    with fake_llm() as fake:
        answerer = OpenAIAnswerer(fake.base_url, "fake-model", api_key="k", judge=judge)
        results = run_eval(
            data, strategies=["token_window", "full"], budgets=[150], answerer=answerer
        )
        answerer.close()
    small = results["results"]["token_window"]["150"]
    full = results["results"]["full"]["unbounded"]
    # the fake can only answer from its context, so its score is the evidence recall
    assert small["answer_score"] == small["evidence_recall"] < 1.0
    assert full["answer_score"] == 1.0
    calls_per_question = 2 if judge else 1
    assert len(fake.requests) == calls_per_question * 4 * 2
    # questions are asked in the order of the conversation (each point ingested once)
    first = fake.requests[0]
    assert first["model"] == "fake-model" and first["temperature"] == 0
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    asked = [
        r["messages"][-1]["content"]
        for r in fake.requests
        if r["messages"][0] == first["messages"][0]
    ]
    assert "What is the code of fact 1?" in asked


def test_endpoint_failure_is_a_clear_error() -> None:
    with fake_llm() as fake:
        url = fake.base_url
    answerer = OpenAIAnswerer(url, "m", api_key="k", timeout=2, max_retries=0)
    with pytest.raises(LLMError, match="the LLM endpoint failed"):
        run_eval(dataset(conversation()), strategies=["full"], answerer=answerer)


@given(st.text())
def test_normalize_keeps_exactly_the_letters_and_numbers(text: str) -> None:
    """The regex equals the definition: casefolded NFKC, characters of categories L* and N*."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    assert normalize(text) == "".join(ch for ch in folded if unicodedata.category(ch)[0] in "LN")
