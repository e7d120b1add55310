"""The metrics of a built context: compressed evidence credited only for an answer in its own
compressed text, ``evidence_recall_whole``, and ``recent_recall`` / ``recent_all``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ctxwindow.eval import Built, Case, Strategy, register_strategy, unregister_strategy
from ctxwindow.eval.dataset import parse_dataset
from ctxwindow.eval.runner import RECENT, answer_in, recent_share, run_eval, score
from ctxwindow.tokens import chat_tokenizer

# -- whole words ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "text", "found"),
    [
        ("two", "a network of computers", False),  # inside a word
        ("two", "we have two cats", True),
        ("Two", "TWO.", True),  # casefolded, punctuation ignored
        ("yes", "yesterday I said no", False),
        ("yes", "Oh, yes!", True),
        ("7 May 2023", "on 7 May, 2023 she went", True),  # spacing and commas ignored
        ("7 May 2023", "on 17 May 2023", False),
        ("A-1042", "order a 1042 shipped", True),
        ("2", "in 2022", False),
        ("K002 K017", "K002 and K017", False),  # the words must follow each other
        ("苹果", "我最喜欢吃苹果派", True),  # no spaces in Chinese: containment
        ("东京", "我住在东京市", True),
        ("東京", "とうきょう", False),
        ("ラーメン", "昨日ラーメンを食べた", True),
        ("서울", "서울에서 왔어요", True),  # a Korean particle attached to the word
        ("iPhone", "我买了iPhone手机", True),  # a CJK neighbour is a boundary
        ("iPhone", "my iPhones", False),
        ("", "anything", False),
    ],
)
def test_an_answer_is_found_only_as_whole_words(answer: str, text: str, found: bool) -> None:
    assert answer_in(answer, text) is found


# -- crediting compressed evidence ------------------------------------------------------


def one_question(answer: str, history: list[str]) -> Case:
    """A case whose only evidence is the first of ``history``, asked after all of it."""
    messages = [
        {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(history)
    ]
    question = {"id": "q", "question": "What was it?", "answer": answer, "evidence": ["m0"]}
    data, _ = parse_dataset(
        {"conversations": [{"id": "c", "messages": messages, "questions": [question]}]}, "t"
    )
    conversation = data.conversations[0]
    return Case(conversation, conversation.questions[0])


class Given(Strategy):
    """Sends the ``Built`` it is given (the question appended): nothing is worked out."""

    name = "given"

    def __init__(self, built: Built) -> None:
        self.built = built

    def start(self, budget: int | None, tokenizer: Any) -> Any:
        return None

    def ingest(self, state: Any, message_id: str, message: Any) -> None:
        pass

    def build(self, state: Any, case: Case) -> Built:
        messages = [*self.built.messages, case.prompt]
        return Built(
            messages, self.built.kept_ids, self.built.compressed_ids, self.built.compressed_text
        )


def outcome(case: Case, built: Built) -> str:
    return score(Given(built), None, case, chat_tokenizer("gpt-4o")).outcome


def compressed(sent: str, *others: str) -> Built:
    """m0 sent compressed as ``sent``, then ``others`` as more messages of the context."""
    messages = [{"role": "user", "content": text} for text in (sent, *others)]
    return Built(messages, frozenset(), frozenset({"m0"}), {"m0": sent})


def test_the_answer_in_the_compressed_evidence_itself_is_credited() -> None:
    case = one_question("Oslo", ["Bo: I moved to Oslo in 2019, after years in Bergen.", "Ok"])
    assert outcome(case, compressed("Bo: moved to Oslo in 2019")) == "c"


def test_the_answer_elsewhere_in_the_context_is_not_credited() -> None:
    case = one_question("Oslo", ["Bo: I moved to Oslo in 2019, after years in Bergen.", "Ok"])
    # The summary of m0 lost the city; another message of the context names it.
    built = compressed("Bo: moved in 2019", "Ann: Oslo is lovely in May.")
    assert outcome(case, built) == "l"


def test_a_short_answer_inside_a_longer_word_is_not_credited() -> None:
    case = one_question("two", ["Ann: I have two cats and a network of friends.", "Ok"])
    assert outcome(case, compressed("Ann: cats, a network of friends")) == "l"
    assert outcome(case, compressed("Ann: two cats, a network")) == "c"


def test_a_cjk_answer_inside_a_compressed_chinese_message_is_credited() -> None:
    case = one_question("饺子", ["Bo: 我上周终于学会做饺子了，很好吃。", "好"])
    assert outcome(case, compressed("Bo: 学会做饺子了")) == "c"
    assert outcome(case, compressed("Bo: 学会做饭了", "Ann: 饺子？")) == "l"


def test_compressed_evidence_without_its_text_is_not_credited() -> None:
    """A strategy that lists compressed ids but not their text: present, never credited."""
    case = one_question("Oslo", ["Bo: I moved to Oslo in 2019, after years in Bergen.", "Ok"])
    built = Built(
        [{"role": "user", "content": "Bo: moved to Oslo"}], frozenset(), frozenset({"m0"})
    )
    assert outcome(case, built) == "l"


def test_a_whole_message_needs_no_answer() -> None:
    case = one_question("Oslo", ["Bo: I moved there in 2019.", "Ok"])
    built = Built([{"role": "user", "content": "Bo: I moved there in 2019."}], frozenset({"m0"}))
    assert outcome(case, built) == "k"


# -- evidence_recall_whole, recent_recall, recent_all on a tiny dataset ------------------


def tiny() -> Any:
    """Six messages, "Fact i: the colour is Ci", and questions asked at three points."""
    messages = [
        {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
         "content": f"Fact {i}: the colour is C{i}."}
        for i in range(6)
    ]  # fmt: skip
    questions = [
        {"id": "old", "question": "Colour 0?", "answer": "C0", "evidence": ["m0"]},
        {"id": "early", "question": "Colour 1?", "answer": "C1", "evidence": ["m1"],
         "after": "m2"},
        {"id": "first", "question": "Colour 0?", "answer": "C0", "evidence": ["m0"],
         "after": "m0"},
        {"id": "three", "question": "Colour 3?", "answer": "C3", "evidence": ["m3"]},
    ]  # fmt: skip
    data, _ = parse_dataset(
        {"conversations": [{"id": "c", "messages": messages, "questions": questions}]}, "tiny"
    )
    return data


class SkipsSecondNewest(Strategy):
    """Keeps its history whole but for two things: the second newest message is left out,
    and m0 is sent compressed to "C0 in short"."""

    name = "skips_second_newest"

    def start(self, budget: int | None, tokenizer: Any) -> Any:
        return []

    def ingest(self, state: Any, message_id: str, message: Any) -> None:
        state.append((message_id, message))

    def build(self, state: Any, case: Case) -> Built:
        sent = [(mid, m) for i, (mid, m) in enumerate(state) if i != len(state) - 2]
        messages = [{"role": "user", "content": "C0 in short"} if mid == "m0" else m
                    for mid, m in sent]  # fmt: skip
        kept = frozenset(mid for mid, _ in sent if mid != "m0")
        short = frozenset({"m0"}) & {mid for mid, _ in sent}
        return Built([*messages, case.prompt], kept, short, dict.fromkeys(short, "C0 in short"))


@pytest.fixture
def skipping() -> Iterator[str]:
    register_strategy(SkipsSecondNewest.name, SkipsSecondNewest)
    yield SkipsSecondNewest.name
    unregister_strategy(SkipsSecondNewest.name)


def test_recent_and_whole_recall_of_a_strategy_of_our_own(skipping: str) -> None:
    results = run_eval(tiny(), strategies=[skipping, "full"], budgets=[1000])
    run = results["results"][skipping]["1000"]
    # old: m0 compressed with C0 -> c, newest m2..m5 less m4: 3/4
    # early: asked after m2, m1 left out -> l, newest m0..m2 less m1: 2/3
    # first: asked after m0 alone, m0 compressed with C0 -> c, newest [m0]: 1
    # three: m3 whole -> k, newest m2..m5 less m4: 3/4
    assert run["outcomes"] == "clck"
    assert run["evidence_recall"] == 0.75
    assert run["evidence_recall_whole"] == 0.25
    assert run["recent_recall"] == pytest.approx((3 / 4 + 2 / 3 + 1 + 3 / 4) / 4, abs=1e-6)
    assert run["recent_all"] == 0.25
    assert run["by_category"]["uncategorized"]["evidence_recall_whole"] == 0.25
    full = results["results"]["full"]["unbounded"]
    assert full["recent_recall"] == full["recent_all"] == full["evidence_recall_whole"] == 1.0


def test_recent_messages_are_the_last_of_the_history_tool_results_included() -> None:
    call = {
        "id": "t1",
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    result = {"id": "t2", "role": "tool", "tool_call_id": "call_1", "content": "42"}
    messages = [
        {"id": "m0", "role": "user", "content": "What is f?"}, call, result,
        {"id": "m3", "role": "assistant", "content": "It is 42."},
        {"id": "m4", "role": "user", "content": "Thanks."},
    ]  # fmt: skip
    question = {"id": "q", "question": "f?", "answer": "42", "evidence": ["t2"]}
    data, _ = parse_dataset(
        {"conversations": [{"id": "c", "messages": messages, "questions": [question]}]}, "t"
    )
    case = Case(data.conversations[0], data.conversations[0].questions[0])
    assert RECENT == 4
    everything_but_the_result = frozenset({"m0", "t1", "m3", "m4"})
    assert recent_share(Built([], everything_but_the_result), case) == 3 / 4
    assert recent_share(Built([], frozenset({"m0"})), case) == 0.0  # m0 is not recent
    assert recent_share(Built([], frozenset({"t1", "m3"}), frozenset({"t2", "m4"})), case) == 1


# -- which message of a window's context is a compressed one ------------------------------


def test_the_text_of_each_compressed_or_summarized_row_is_found_in_the_context() -> None:
    """By the report's previews: a summarized message's text is the summary's, a compressed
    one's its own message, told from a message of the same preview by their order."""
    from ctxwindow.eval.strategies import compressed_texts
    from ctxwindow.messages import Entry
    from ctxwindow.policies.explain import Decision

    prefix = '{"order": "A-1042", "status": "in transit", "carrier": "Nordpost", '
    summary = Entry({"role": "user", "content": "Summary of earlier conversation: Oslo"}, 9, -1)
    folded = Entry({"role": "user", "content": "I live in Oslo."}, 5, 1, id="e1")
    same_start = Entry({"role": "tool", "content": prefix + '"eta": "May 3"}'}, 30, 2, id="e2")
    shortened = Entry({"role": "tool", "content": prefix + '"eta": "May 9"}'}, 30, 3, id="e3")
    rows = [
        Decision.of(summary, "pinned", stored=False),
        Decision.of(folded, "summarized"),
        Decision.of(same_start, "kept"),
        Decision.of(shortened, "compressed"),
    ]
    assert rows[2].preview == rows[3].preview  # 60 characters cannot tell them apart
    messages = [summary.message, same_start.message, shortened.message]
    ids = {"e1": "m1", "e2": "m2", "e3": "m3"}
    assert compressed_texts(messages, rows, ids) == {
        "m1": "Summary of earlier conversation: Oslo",
        "m3": shortened.message["content"],
    }


# -- the printed table ------------------------------------------------------------------


def test_the_printed_table_shows_kept_whole_and_recent_and_says_what_they_are() -> None:
    from rich.console import Console

    from ctxwindow.eval.command import results_table

    results = run_eval(tiny(), strategies=["full"], budgets=[1000])
    results["results"]["older"] = {"1000": dict(results["results"]["full"]["unbounded"])}
    del results["results"]["older"]["1000"]["recent_recall"]  # as results of older versions
    console = Console(width=200, record=True)
    console.print(results_table(results))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "strategy" in line)
    assert [c.strip() for c in header.split("┃")][3:7] == [
        "evidence recall", "kept whole", "turn recall", "recent"
    ]  # fmt: skip
    full = next(line for line in text.splitlines() if "full" in line)
    assert [c.strip() for c in full.split("│")][3:7] == ["100.0%", "100.0%", "100.0%", "100.0%"]
    older = next(line for line in text.splitlines() if "older" in line)
    assert [c.strip() for c in older.split("│")][6] == "—"
    assert "kept whole: evidence recall with no credit for compressed forms" in text
    assert f"the last {RECENT} messages before a question" in text
