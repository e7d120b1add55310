"""The simple baselines of ``ctxwindow.eval.baselines``: what they keep, on hand-made talks.

Dense ranking runs on ``Concepts``, a tiny deterministic embedder of our own
(one dimension per group of related words), so these tests need no model;
one test runs the real packaged embedder when the embeddings extra is there.
"""

from __future__ import annotations

import copy
import zlib
from collections import Counter
from typing import Any

import numpy as np
import pytest

from ctxwindow.eval import Case, Strategy, bm25, embeddings, get_strategy, run_eval
from ctxwindow.eval import baselines as bl
from ctxwindow.eval.dataset import Dataset, parse_dataset
from ctxwindow.tokens import chat_tokenizer

from .support.two_forms import TwoForms

TOKENIZER = chat_tokenizer("gpt-4o")
BASELINES = [
    "bm25_fill",
    "dense_fill",
    "rrf_fill",
    "bm25_fill_nb",
    "dense_fill_nb",
    "rrf_fill_nb",
    "recent_rrf",
]
DENSE = ["dense_fill", "rrf_fill", "dense_fill_nb", "rrf_fill_nb", "recent_rrf"]
WITH_BM25 = ["bm25", *BASELINES]  # ``bm25`` (the archive's BM25) shares their units and fill


class Concepts:
    """A fake embedder: one dimension per group of related words, other words hashed
    into the rest with a small weight (so meaning outweighs a shared "what")."""

    GROUPS = (
        {"dog", "puppy", "pet", "biscuit"},
        {"pottery", "bowl", "clay", "classes"},
        {"snow", "cold", "oslo", "weather", "degrees", "freezing"},
        {"lisbon", "trams", "pastries", "trip"},
        {"teal", "colour", "color", "favourite"},
        {"猫", "小花", "宠物"},
        {"东京", "旅行"},
    )
    dim = 24

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        lowered = text.lower()
        for word in "".join(c if c.isalnum() else " " for c in lowered).split():
            found = [g for g, group in enumerate(self.GROUPS) if word in group]
            if found:
                vector[found[0]] += 1.0
            else:
                vector[8 + zlib.crc32(word.encode()) % 16] += 0.25
        for g, group in enumerate(self.GROUPS):  # CJK words are not split by spaces
            vector[g] += sum(2.0 for word in group if not word.isascii() and word in text)
        return vector


def tool_call(call_id: str, city: str) -> dict[str, Any]:
    arguments = f'{{"city": "{city}"}}'
    function = {"name": "weather", "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function}


ENGLISH: list[dict[str, Any]] = [
    {"id": "m0", "role": "user", "content": "I just got back from Lisbon, the trams were lovely."},
    {"id": "m1", "role": "assistant", "content": "Lisbon sounds wonderful. Any pastries?"},
    {"id": "m2", "role": "user", "content": "Pastel de nata every morning with my sister Maya."},
    {"id": "m3", "role": "assistant", "content": "Travelling with family is a joy."},
    {"id": "m4", "role": "user", "content": "Next month I start pottery classes on Thursdays."},
    {"id": "m5", "role": "assistant", "content": "Lovely! What will you make first?"},
    {"id": "m6", "role": "user", "content": "A bowl for my puppy Biscuit."},
    {"id": "m7", "role": "assistant", "content": "Biscuit will be delighted."},
    {"id": "m8", "role": "assistant", "content": None,
     "tool_calls": [tool_call("c1", "Oslo"), tool_call("c2", "Bergen")]},
    {"id": "m9", "role": "tool", "tool_call_id": "c1", "content": "Oslo: snow, minus four degrees"},
    {"id": "m10", "role": "tool", "tool_call_id": "c2", "content": "Bergen: rain, six degrees"},
    {"id": "m11", "role": "assistant", "content": "Oslo has snow and Bergen has rain today."},
    {"id": "m12", "role": "user", "content": "My favourite colour is teal, by the way."},
    {"id": "m13", "role": "assistant", "content": "Teal suits you."},
    *(
        {"id": f"f{i}", "role": "user" if i % 2 == 0 else "assistant",
         "content": f"Small talk number {i} about the weekend, the garden and the neighbours."}
        for i in range(12)
    ),
]  # fmt: skip

CHINESE: list[dict[str, Any]] = [
    {"id": "z0", "role": "user", "content": "我上周去东京旅行了，天气很好。"},
    {"id": "z1", "role": "assistant", "content": "听起来很开心！"},
    {"id": "z2", "role": "user", "content": "我的猫叫小花，它最喜欢吃鱼。"},
    {"id": "z3", "role": "assistant", "content": "小花真可爱。"},
    {"id": "z4", "role": "user", "content": "下个月我要去北京开会。"},
    {"id": "z5", "role": "assistant", "content": "祝你一路顺利。"},
    *(
        {"id": f"g{i}", "role": "user" if i % 2 == 0 else "assistant",
         "content": f"第{i}次闲聊：周末的花园和邻居。"}
        for i in range(10)
    ),
]  # fmt: skip

QUESTIONS = [
    {"id": "pottery", "question": "On which day are the pottery classes?", "answer": "Thursdays",
     "evidence": ["m4"]},
    {"id": "snow", "question": "How cold was it in Oslo?", "answer": "minus four",
     "evidence": ["m9"]},
    {"id": "dog", "question": "What is the dog called?", "answer": "Biscuit", "evidence": ["m6"]},
    {"id": "early", "question": "Who ate pastel de nata with me?", "answer": "Maya",
     "evidence": ["m2"], "after": "m7"},
]  # fmt: skip

CAT = {"id": "cat", "question": "我的猫叫什么名字？", "answer": "小花", "evidence": ["z2"]}


def data() -> Dataset:
    found, problems = parse_dataset(
        {
            "conversations": [
                {"id": "en", "messages": ENGLISH, "questions": QUESTIONS},
                {"id": "zh", "messages": CHINESE, "questions": [CAT]},
            ]
        },
        "test",
    )
    assert problems == []
    return found


def case(qid: str) -> Case:
    for conversation in data().conversations:
        for question in conversation.questions:
            if question.id == qid:
                return Case(conversation, question)
    raise KeyError(qid)


def baseline(name: str, embedder: Any = None) -> Strategy:
    """The named baseline, the dense ones on ``embedder`` (default: a new ``Concepts``)."""
    kind = type(get_strategy(name))
    if name in DENSE:
        return kind(embedder=embedder or Concepts())  # type: ignore[call-arg]
    return kind()


def built(name: str, qid: str, budget: int, embedder: Any = None) -> Any:
    strategy = baseline(name, embedder)
    c = case(qid)
    return strategy.build(strategy.prepare(c, budget, TOKENIZER), c)


def kept_order(result: Any, c: Case) -> list[int]:
    order = [message_id for message_id, _ in c.history]
    return sorted(order.index(i) for i in result.kept_ids)


# -- what each keeps ------------------------------------------------------------------------


@pytest.mark.parametrize("name", BASELINES)
def test_each_baseline_keeps_the_best_matching_turn(name: str) -> None:
    """A budget for about a third of the talk: the turn the question is about is in it."""
    assert "m4" in built(name, "pottery", 250).kept_ids


@pytest.mark.parametrize("name", BASELINES)
def test_each_baseline_keeps_the_chinese_turn(name: str) -> None:
    assert "z2" in built(name, "cat", 80).kept_ids


def test_chinese_is_matched_on_bigrams_that_bm25s_alone_does_not_see() -> None:
    bm25s, stemmer = bm25.load_bm25s()

    def plain(text: str) -> set[str]:
        found = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, return_ids=False)
        return set(found[0])

    question, turn = CAT["question"], CHINESE[2]["content"]
    assert not plain(question) & plain(turn)  # one "word" each
    assert {"我的", "的猫", "猫叫"} <= set(bl.terms(question)) & set(bl.terms(turn))


def test_dense_finds_by_meaning_what_bm25_cannot() -> None:
    """ "dog" is in no turn: only the embedder knows that a puppy is one."""
    assert "m6" in built("dense_fill", "dog", 60).kept_ids
    assert "m6" in built("rrf_fill", "dog", 60).kept_ids
    assert "m6" not in built("bm25_fill", "dog", 10_000).kept_ids


def test_bm25_sends_no_turn_that_shares_no_term_with_the_question() -> None:
    result = built("bm25_fill", "pottery", 10_000)
    assert result.kept_ids == {"m4"}  # "pottery", "classes"; "day" is in no turn
    assert len(built("dense_fill", "pottery", 10_000).kept_ids) == len(ENGLISH)


# -- the budget, units, order ---------------------------------------------------------------


@pytest.mark.parametrize("name", WITH_BM25)
def test_the_budget_is_never_exceeded(name: str) -> None:
    for qid in ("pottery", "snow", "dog", "early", "cat"):
        for budget in (40, 55, 70, 90, 120, 170, 240, 330, 450, 700):
            result = built(name, qid, budget)
            assert TOKENIZER.count(result.messages) <= budget, (qid, budget)


def test_a_turn_that_does_not_fit_is_passed_over_for_smaller_ones() -> None:
    units, tokens = [0, 1, 2, 3], [10, 50, 10, 30]
    chosen: set[int] = set()
    assert bl.fill([0, 1, 2, 3], units, tokens, 25, chosen) == 20
    assert chosen == {0, 2}
    chosen = {3}
    assert bl.fill([3, 0], units, tokens, 40, chosen, used=30) == 40  # 3 is not counted twice
    assert chosen == {0, 3}


@pytest.mark.parametrize("name", DENSE)
def test_a_dense_baseline_fills_the_budget(name: str) -> None:
    """Every turn is ranked, so what is left over is less than the largest turn."""
    c = case("pottery")
    result = built(name, "pottery", 330)
    largest = max(TOKENIZER.message_tokens(m) for _, m in c.history)
    assert 330 - largest < TOKENIZER.count(result.messages) <= 330


@pytest.mark.parametrize("name", WITH_BM25)
def test_tool_units_are_kept_whole(name: str) -> None:
    unit = {"m8", "m9", "m10"}
    assert unit <= built(name, "snow", 200).kept_ids
    for budget in (45, 60, 80, 110, 150, 200, 300):
        for qid in ("snow", "pottery", "dog"):
            kept = built(name, qid, budget).kept_ids
            assert not kept & unit or unit <= kept, (qid, budget)


@pytest.mark.parametrize("name", WITH_BM25)
def test_turns_are_sent_in_their_order_then_the_question(name: str) -> None:
    c = case("snow")
    result = built(name, "snow", 300)
    history = [message for _, message in c.history]
    sent = result.messages[:-1]
    assert [history.index(m) for m in sent] == kept_order(result, c)
    assert result.messages[-1] == c.prompt
    assert len(sent) == len(result.kept_ids) > 3


# -- build reads, respond adds ----------------------------------------------------------------


@pytest.mark.parametrize("name", BASELINES)
def test_build_does_not_change_the_state(name: str) -> None:
    strategy = baseline(name)
    pottery, snow = case("pottery"), case("snow")
    state = strategy.prepare(pottery, 200, TOKENIZER)
    before = copy.deepcopy((state.history, state.lexical, state.dense))
    first = strategy.build(state, pottery)
    strategy.build(state, snow)
    assert strategy.build(state, pottery) == first
    history, lexical, dense = before
    assert state.history == history
    assert state.lexical == lexical
    if state.dense is not None:
        assert np.array_equal(state.dense.rows, dense.rows)
        assert state.dense.n == dense.n == len(history.ids)


@pytest.mark.parametrize("name", BASELINES)
def test_a_question_asked_earlier_sees_only_the_turns_before_it(name: str) -> None:
    result = built(name, "early", 10_000)
    assert "m2" in result.kept_ids
    assert result.kept_ids <= {f"m{i}" for i in range(8)}


@pytest.mark.parametrize("name", BASELINES)
def test_respond_sends_what_build_would_and_adds_the_turn(name: str) -> None:
    strategy = baseline(name)
    c = case("pottery")
    state = strategy.prepare(c, 200, TOKENIZER)
    expected = strategy.build(state, c).messages
    sent = strategy.respond(state, "q", c.prompt)
    assert sent == expected
    assert state.history.ids[-1] == "q"
    assert strategy.respond(strategy.start(200, TOKENIZER), "q", c.prompt) == [c.prompt]


# -- neighbours, recent ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bm25_fill_nb", "dense_fill_nb", "rrf_fill_nb"])
def test_neighbours_come_with_their_hit(name: str) -> None:
    kept = built(name, "pottery", 120).kept_ids
    assert {"m3", "m4", "m5"} <= kept
    # the hit of a tool unit brings the whole unit and the turns either side of it
    assert {"m7", "m8", "m9", "m10", "m11"} <= built(name, "snow", 200).kept_ids


def test_a_hit_whose_block_does_not_fit_is_taken_alone() -> None:
    c = case("pottery")
    strategy = baseline("bm25_fill_nb")
    state = strategy.prepare(c, 10_000, TOKENIZER)
    tokens = state.history.tokens
    question = TOKENIZER.count([c.prompt])
    alone = question + tokens[4]
    block = question + sum(tokens[3:6])
    assert "m4" in built("bm25_fill", "pottery", alone).kept_ids
    assert built("bm25_fill_nb", "pottery", block - 1).kept_ids == {"m4"}
    assert not built("bm25_fill_nb", "pottery", alone - 1).kept_ids
    assert {"m3", "m4", "m5"} == built("bm25_fill_nb", "pottery", block).kept_ids


def test_a_block_costs_only_what_it_adds() -> None:
    """Hit 2 brings 1-3; hit 3, already in, still brings 4, costing 4 alone."""
    units, tokens = [0, 1, 2, 3, 4, 5], [10] * 6
    chosen: set[int] = set()
    assert bl.fill([2, 3], units, tokens, 40, chosen, neighbours=True) == 40
    assert chosen == {1, 2, 3, 4}
    chosen = set()
    assert bl.fill([2, 3, 5], units, tokens, 35, chosen, neighbours=True) == 30
    assert chosen == {1, 2, 3}  # 4 would overflow; 5's block (4, 5) too
    chosen = set()
    assert bl.fill([2, 4, 0], units, tokens, 50, chosen, neighbours=True) == 50
    assert chosen == {1, 2, 3, 4, 5}  # 4's block adds 4 and 5; 0's (0, 1) would overflow
    chosen = set()
    assert bl.fill([2, 0], units, tokens, 25, chosen, neighbours=True) == 20
    assert chosen == {0, 2}  # neither block fits: each hit alone


def test_neighbours_of_a_unit_are_whole_units() -> None:
    units = [0, 1, 1, 1, 4, 5, 5]  # 1-3 and 5-6 are tool units
    assert bl.block_of(units, 0) == [0, 1, 2, 3]
    assert bl.block_of(units, 2) == [0, 1, 2, 3, 4]
    assert bl.block_of(units, 4) == [1, 2, 3, 4, 5, 6]
    assert bl.block_of(units, 6) == [4, 5, 6]


def test_recent_rrf_has_the_newest_turns_and_the_best_older_one() -> None:
    c, budget = case("pottery"), 200
    result = built("recent_rrf", "pottery", budget)
    half = (budget - TOKENIZER.count([c.prompt])) // 2
    sizes = [TOKENIZER.message_tokens(m) for _, m in c.history]
    k = max(k for k in range(len(sizes)) if sum(sizes[len(sizes) - k :]) <= half)
    assert k >= 2
    assert {mid for mid, _ in c.history[-k:]} <= result.kept_ids
    assert "m4" in result.kept_ids  # the best older turn, by RRF
    window = get_strategy("token_window")
    assert "m4" not in window.build(window.prepare(c, budget, TOKENIZER), c).kept_ids


def test_newest_stops_at_the_first_unit_that_does_not_fit() -> None:
    units, tokens = [0, 1, 1, 1, 4], [5, 10, 10, 10, 5]
    assert bl.newest(units, tokens, 30) == (4, 5)  # the tool unit 1-3 (30) does not fit
    assert bl.newest(units, tokens, 35) == (1, 35)
    assert bl.newest(units, tokens, 40) == (0, 40)
    assert bl.newest(units, tokens, 4) == (5, 0)


# -- the rankings ---------------------------------------------------------------------------


def test_rrf_sums_reciprocal_ranks_with_k_60() -> None:
    # 1 and 3: 1/61 + 1/63 each, more than 2's 2/62; equal sums keep the smaller first
    assert bl.rrf([[1, 2, 3], [3, 2, 1]]) == [1, 3, 2]
    assert bl.rrf([[6, 5], [5]]) == [5, 6]  # 1/62 + 1/61 beats 1/61
    assert bl.rrf([[7, 8], [8, 7]], k=0) == [7, 8]
    assert bl.rrf([[1, 2], [2]], k=1000) == [2, 1]

    def both_at_beats_first_in_one(r: int) -> bool:
        """Whether rank r in both rankings, 2 / (k + r), beats rank 1 in one, 1 / (k + 1)."""
        order = bl.rrf([[0, *range(100, 98 + r), 1], [*range(200, 199 + r), 1]])
        return order.index(1) < order.index(0)

    assert both_at_beats_first_in_one(61)  # so k >= 60
    assert not both_at_beats_first_in_one(63)  # so k <= 61


def test_the_lexical_index_scores_as_bm25s_does() -> None:
    """bm25s's BM25(k1=1.5, b=0.75, method="lucene") on the same terms: the same scores."""
    bm25s, _ = bm25.load_bm25s()
    texts = [m["content"] or "" for m in ENGLISH] + ["", "the and of", "snow snow snow Oslo"]
    documents = [list(bl.terms(t)) for t in texts]
    index = bl.Lexical()
    for document in documents:
        index.add(document)
    reference = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    reference.index(documents, show_progress=False)
    for question in ("How cold was the snow in Oslo?", "snow snow pottery", "teal Biscuit"):
        query = list(bl.terms(question))
        expected = reference.get_scores([t for t in query if t in reference.vocab_dict])
        assert np.allclose(index.scores(query), expected, rtol=1e-5, atol=1e-6)
        assert index.scores(query).max() > 0


def test_bm25_terms_are_bm25s_tokens_for_english() -> None:
    bm25s, stemmer = bm25.load_bm25s()
    text = "The runners were running quickly to Lisbon's trams, 42 times."
    tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, return_ids=False)
    assert bl.terms(text) == tuple(tokens[0])
    assert "run" in bl.terms(text)


# -- embedding once, the real embedder ---------------------------------------------------------


def test_each_text_is_embedded_once_across_budgets_and_strategies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = Concepts()
    monkeypatch.setattr(embeddings, "_DEFAULT", embeddings.Embeddings(lambda: fake))
    run_eval(data(), strategies=DENSE, budgets=[60, 120, 240], workers=1)
    embedded = Counter(text for call in fake.calls for text in call)
    assert embedded and max(embedded.values()) == 1
    assert len(fake.calls) == 2  # one batch per conversation, noted by calibrate
    assert "How cold was it in Oslo?" in embedded


class TwoFormConcepts(TwoForms, Concepts):
    """An asymmetric model (as E5): what is searched and the questions in forms of their own."""


def test_an_asymmetric_model_embeds_turns_as_passages_and_questions_as_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the archive does: the strongest form of the model for retrieval, each text once."""
    fake = TwoFormConcepts()
    monkeypatch.setattr(embeddings, "_DEFAULT", embeddings.Embeddings(lambda: fake))
    dataset = data()
    run_eval(dataset, strategies=DENSE, budgets=[60, 120], workers=1)
    assert fake.calls == []  # the symmetric form is never used
    passages = Counter(t for form, texts in fake.forms if form == "passage" for t in texts)
    queries = Counter(t for form, texts in fake.forms if form == "query" for t in texts)
    assert max(passages.values()) == 1 and max(queries.values()) == 1
    asked = {q.question for c in dataset.conversations for q in c.questions}
    assert set(queries) == asked
    assert not asked & set(passages)  # no question embedded as a passage
    assert "How cold was it in Oslo?" in queries


def test_dense_baselines_declare_their_extra_and_all_are_baselines() -> None:
    for name in BASELINES:
        strategy = get_strategy(name)
        assert strategy.baseline
        assert strategy.extra == ("dense" if name in DENSE else None)
    assert get_strategy("bm25").baseline
    assert not get_strategy("token_window").baseline
    assert not get_strategy("hybrid").baseline


def test_dense_fill_with_the_real_packaged_embedder() -> None:
    try:
        embedder = bl.default_embedder()
    except ImportError as exc:
        pytest.skip(f"the dense extra is not installed ({exc})")
    strategy, c = baseline("dense_fill", embedder), case("dog")
    strategy.calibrate([c], 60, TOKENIZER)  # one batch, not a call a turn: faster on a CPU
    result = strategy.build(strategy.prepare(c, 60, TOKENIZER), c)
    assert "m6" in result.kept_ids  # "puppy" for "dog": by meaning, no shared word
    assert TOKENIZER.count(result.messages) <= 60
