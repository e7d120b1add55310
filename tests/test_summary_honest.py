"""A report calls a message ``summarized`` only while the summary the model sees carries
something of it; folded but gone from the summary, it is ``evicted``.

Every message here carries codes (``K12x0``) in its sentences, so what the
summary holds of a message can be checked from the summary's text alone,
without the summarizer's own bookkeeping: a ``summarized`` row has a code of
it in the summary, a row folded away has none. Through a ``PriorityWindow``
with the extractive rolling summary (distinct facts, random conversations in
English, Chinese, Japanese and emoji), a summarizer that does not say what
it kept (read by the marks rule), and the 220-turn, 3,000-token session of
the live case through a ``ContextManager``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import ContextManager, PriorityWindow
from ctxwindow.compress import Extractive, RollingSummary
from ctxwindow.compress.prompt import HEADINGS
from ctxwindow.messages import Entry, Message
from ctxwindow.policies import Context, Folding, Keeping
from ctxwindow.policies.journal import FOLDED, FOLDED_AWAY
from ctxwindow.tokens import chat_tokenizer
from tests.support.windows import check_totals

TOK = chat_tokenizer("gpt-4o")
CODE = re.compile(r"K\d+x\d+")

# Sentences with a slot for a code; small talk has none (and is never kept).
FACTS = {
    "en": [
        "Order {c} ships to Oslo on Friday.",
        "Caroline paid 480 dollars for ticket {c} at the Lisbon office.",
        "We agreed to move the launch of build {c} to 12 March.",
        "The router in room 4B failed with error {c} this morning.",
    ],
    "zh": [
        "订单{c}已经发货了，预计星期五到上海。",
        "我们决定下周三在北京见面，会议编号{c}。",
        "王老师说合同{c}要在月底前签好。",
    ],
    "ja": [
        "田中さんは請求書{c}の件で3200円払いました。",
        "来週の会議は大阪で、番号は{c}です。",
        "サーバー{c}でエラーが出ました。",
    ],
    "emoji": [
        "🎉 Party for team {c} at the Blue Lagoon tonight! 🥳",
        "📦 Parcel {c} left the Tromsø depot 🚚",
    ],
}
TALK = ["Haha, thanks so much! 😂", "好的，谢谢！", "ありがとうございます！", "👍👍", "Wow 🎉"]


def fact(language: str, n: int, turn: int, part: int = 0) -> str:
    templates = FACTS[language]
    return templates[n % len(templates)].format(c=f"K{turn}x{part}")


def codes(text: str) -> set[str]:
    return set(CODE.findall(text))


def summary_text(messages: Sequence[Message]) -> str:
    """The text of the summary message of a context ("" when there is none)."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and content.startswith(tuple(HEADINGS.values())):
            return content
    return ""


def check_honest(context: Context, said: dict[str, str], *, lines: bool = True) -> None:
    """Each summarized row has a code in the summary; each row folded away has none; the
    totals add up to the rows; with ``lines`` (an extractive summary: one line a turn),
    there are no more summarized rows than lines."""
    report, messages = context.report, context.messages
    check_totals(report, context.total_tokens)
    in_summary = codes(summary_text(messages))
    rows = list(report.decisions)
    for row in rows:
        if row.state == "summarized":
            assert row.reason == FOLDED
            assert codes(said[row.id]) & in_summary, f"summarized, not in the summary: {row}"
        if row.reason == FOLDED_AWAY:
            assert row.state == "evicted" and row.tokens == 0
            assert not codes(said[row.id]) & in_summary, f"in the summary, said evicted: {row}"
    if lines:
        summarized = sum(row.state == "summarized" for row in rows)
        written = [line for line in summary_text(messages).splitlines()[1:] if line.strip()]
        assert summarized <= len(written), "a summary line is one message's"


def small_window(budget: int = 600, **overrides: Any) -> PriorityWindow:
    """The window these tests share; ``overrides`` are fields of its ``Folding`` or keywords."""
    folding: dict[str, Any] = {
        "summarizer": RollingSummary(Extractive(TOK), TOK).fold,
        "summary_tokens": budget // 6,
        "fold_tokens": budget // 12,
    }
    folding.update((name, overrides.pop(name)) for name in list(overrides) if name in folding)
    keeping = Keeping(reserve_recent=0)
    return PriorityWindow(
        budget, system="Be brief.", keeping=keeping, folding=Folding(**folding), **overrides
    )


def add_all(window: PriorityWindow, texts: Sequence[str]) -> dict[str, str]:
    """Add ``texts`` (user and assistant in turn); what each entry id said."""
    said: dict[str, str] = {}
    for n, text in enumerate(texts):
        entry = window.add("user" if n % 2 == 0 else "assistant", text)
        if entry is not None:
            said[entry.id] = text
    return said


def distinct_facts(turns: int) -> list[str]:
    languages = list(FACTS)
    return [fact(languages[n % len(languages)], n // len(languages), n) for n in range(turns)]


def test_a_long_conversation_of_distinct_facts_reports_only_what_the_summary_holds() -> None:
    window = small_window()
    said = add_all(window, distinct_facts(300))
    built = window.build()
    check_honest(built, said)
    states = built.report.messages_by_state
    away = [d for d in built.report.decisions if d.reason == FOLDED_AWAY]
    assert states["summarized"] > 0 and len(away) > 100, "the summary holds a few; most went"
    folded = states["summarized"] + len(away)
    assert built.report.evicted_entries == folded + states["evicted"] - len(away)
    [summary] = [d for d in built.report.decisions if d.category == "summary"]
    assert f"something of {states['summarized']:,} of the {folded:,}" in summary.reason


def test_a_message_whose_fact_a_later_fold_drops_becomes_evicted() -> None:
    window = small_window()
    said = add_all(window, distinct_facts(60))
    early = window.build()
    before = {d.id for d in early.report.decisions if d.state == "summarized"}
    assert before
    said |= add_all(window, distinct_facts(400)[60:])
    late = window.build()
    check_honest(late, said)
    now = {d.id: d for d in late.report.decisions}
    dropped = [i for i in before if now[i].state != "summarized"]
    assert dropped and all(now[i].reason == FOLDED_AWAY for i in dropped)
    # The early report, read only now, still tells the summary it was built with.
    check_honest(early, said)
    assert {d.id for d in early.report.decisions if d.state == "summarized"} == before


def test_a_summary_with_no_room_for_a_fact_claims_no_message() -> None:
    window = small_window(300, summary_tokens=20, fold_tokens=20)
    said = add_all(window, distinct_facts(80))
    built = window.build()
    check_honest(built, said)
    assert built.report.messages_by_state["summarized"] == 0
    assert any(d.reason == FOLDED_AWAY for d in built.report.decisions)


def forgetful(old: Entry | None, evicted: Sequence[Entry], budget: int) -> Entry:
    """A summarizer that does not say what it kept: the codes of the newest batch only."""
    found = sorted({c for e in evicted for c in codes(str(e.message["content"]))})
    message: Message = {"role": "user", "content": f"{HEADINGS['en']}\n" + " ".join(found[:6])}
    return Entry(message, TOK.message_tokens(message), seq=-1, kind="summary")


def test_a_summarizer_that_does_not_say_is_read_by_the_marks_it_left() -> None:
    window = small_window(summarizer=forgetful)
    said = add_all(window, distinct_facts(120))
    built = window.build()
    check_honest(built, said, lines=False)
    summarized = [d for d in built.report.decisions if d.state == "summarized"]
    assert 0 < len(summarized) <= 6


# -- random conversations ------------------------------------------------------------

languages = st.sampled_from(list(FACTS))
turns = st.lists(
    st.one_of(
        st.tuples(st.just("fact"), st.lists(st.tuples(languages, st.integers(0, 9)), min_size=1,
                                             max_size=3)),
        st.tuples(st.just("talk"), st.sampled_from(TALK)),
    ),
    min_size=40,
    max_size=150,
)  # fmt: skip


def conversation(program: list[Any]) -> list[str]:
    texts = []
    for turn, (kind, what) in enumerate(program):
        if kind == "talk":
            texts.append(what)
        else:  # one to three facts of one message, each with its code
            texts.append(" ".join(fact(lang, n, turn, part) for part, (lang, n) in enumerate(what)))
    return texts


@settings(max_examples=60, deadline=None)
@given(turns, st.integers(200, 600), st.sampled_from([None, 0.8]))
def test_property_a_summarized_row_is_in_the_summary_and_one_folded_away_is_not(
    program: list[Any], budget: int, low_water: float | None
) -> None:
    window = small_window(budget, low_water=low_water)
    said = add_all(window, conversation(program))
    built = window.build()
    check_honest(built, said)
    narrowed = window.build(max_tokens=max(budget // 2, window.total_tokens // 2, 200))
    check_honest(narrowed, said)


# -- the live case -------------------------------------------------------------------


def live_turn(n: int) -> tuple[str, str]:
    city = ["Oslo", "Lima", "Kyoto", "Porto", "Quito", "Hanoi", "Accra", "Tunis"][n % 8]
    asked = f"Please note that order K{n}x0 ships to {city} on day {n % 28 + 1}, {n * 3} boxes."
    if n % 3 == 1:
        asked = fact("zh", n, n) + " " + fact("ja", n, n, 1)
    return asked, f"Noted: order K{n}x2 goes to {city}, tracking K{n}x3. 👍"


def test_the_live_case_220_turns_in_3000_tokens_claims_what_the_summary_holds() -> None:
    manager = ContextManager("memory://", model="gpt-4o", budget=3000, reserve_output=0)
    try:
        for n in range(220):
            asked, answer = live_turn(n)
            manager.add("s", {"role": "user", "content": asked})
            manager.add("s", {"role": "assistant", "content": answer})
            if n % 20 == 0:
                manager.build("s")  # a chat builds as it goes: the window steps
        built = manager.build("s")
        history = manager.store.load("s")
    finally:
        manager.close()
    said = {e.id: str(e.message["content"]) for e in history}
    check_honest(built, said)
    in_summary = codes(summary_text(built.messages))
    drawn_on = {i for i, text in said.items() if codes(text) & in_summary}
    summarized = {d.id for d in built.report.decisions if d.state == "summarized"}
    assert summarized and summarized <= drawn_on
    assert len(summarized) <= len(drawn_on) < 60, "a few dozen at most, not 386"
    gone = [d for d in built.report.decisions if d.reason == FOLDED_AWAY]
    assert len(gone) > 200 and all(d.seq is not None and d.seq < 440 for d in gone)
