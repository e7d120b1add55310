"""The rolling summary keeps facts: what survives a fold, and what always holds."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow.compress import Extractive, LLMSummarizer, RollingSummary, Truncate
from ctxwindow.compress.calendar import MAX_WAITING, Calendar
from ctxwindow.compress.facts import weigh
from ctxwindow.compress.prompt import HEADINGS
from ctxwindow.compress.rolling import credit, credited_ids
from ctxwindow.compress.turns import TurnReader, header_date, timestamp_date
from ctxwindow.messages import Entry

from .support.compress import TOK, FakeModel, make

MARKER_ONLY = re.compile(r"\W*(?:\[… \d+ chars \(\d+ tokens\) cut by ctxwindow …\]\W*)*")


def rolling() -> RollingSummary:
    return RollingSummary(Extractive(TOK), TOK)


def said(role: str, text: str, seq: int, **metadata: Any) -> Entry:
    return make({"role": role, "content": text}, seq, metadata=metadata)


def body(entry: Entry) -> str:
    text = entry.message["content"]
    assert isinstance(text, str)
    return text.split("\n", 1)[1]


def fold_all(entries: list[Entry], budget: int, batch: int = 4) -> Entry:
    summary = None
    fold = rolling().fold
    for start in range(0, len(entries), batch):
        summary = fold(summary, entries[start : start + batch], budget)
    assert summary is not None
    return summary


SMALL_TALK_EN = [
    "Hey! How are you doing?",
    "Haha, that's awesome! 😂",
    "Thanks so much, that sounds great.",
    "Wow, cool! Good to hear.",
    "Sure, sounds good to me!",
    "Aww, that's so sweet of you!",
]
FACTS_EN = [
    "My order A-1042 ships to 221B Baker Street on Friday.",
    "We agreed to move the launch to 12 March 2025.",
    "Please email the invoice to ana.lima@example.com before v2.3.1 is released.",
    "I decided to book the Lisbon flight, it costs $480.",
]


def chat(talk: list[str], facts: list[str]) -> list[Entry]:
    """Small talk around each fact, users and assistants in turn."""
    texts = [t for fact, chat in zip(facts, talk, strict=False) for t in (chat, fact, chat)]
    texts += talk[len(facts) :]
    return [said("user" if n % 2 else "assistant", t, n) for n, t in enumerate(texts)]


# -- what survives -------------------------------------------------------------------


def test_names_numbers_dates_and_decisions_survive_small_talk() -> None:
    summary = fold_all(chat(SMALL_TALK_EN, FACTS_EN), 110)
    text = body(summary)
    for kept in ("A-1042", "Friday", "12 March 2025", "ana.lima@example.com", "Lisbon", "$480"):
        assert kept in text
    for talk in SMALL_TALK_EN:
        assert talk not in text
    assert summary.tokens <= 110


def test_chinese_facts_survive_small_talk() -> None:
    talk = ["你好！", "哈哈，太好了！", "谢谢，没问题。", "好的好的。", "嗯嗯。"]
    facts = [
        "我的订单号是220186848339，一共897元。",
        "我们决定下周三在上海开会。",
        "快递单号SF9477515917953，预计8月9日到。",
    ]
    text = body(fold_all(chat(talk, facts), 90))
    for kept in ("220186848339", "897元", "决定", "上海", "SF9477515917953", "8月9日"):
        assert kept in text
    assert "哈哈" not in text and "谢谢" not in text
    assert text.startswith(("user: ", "assistant: "))
    assert fold_all(chat(talk, facts), 90).message["content"].startswith(HEADINGS["zh"])


def test_japanese_facts_survive_small_talk() -> None:
    talk = ["こんにちは！", "ありがとうございます！", "なるほど、いいね。", "はい、了解です。"]
    facts = [
        "田中さんと来週の金曜日に大阪で会う約束をしました。",
        "注文番号はJP-5521で、3200円でした。",
    ]
    summary = fold_all(chat(talk, facts), 80)
    text = body(summary)
    for kept in ("田中さん", "金曜日", "大阪", "約束", "JP-5521", "3200円"):
        assert kept in text
    assert "こんにちは" not in text and "ありがとう" not in text
    assert summary.message["content"].startswith(HEADINGS["ja"])


ADVICE = {
    "en": [
        "Overwatering is the most common problem with houseplants, so let the soil dry out first.",
        "Consistency matters more than intensity, especially in the first few months.",
        "A pair of shoes that really fits matters more than any other piece of gear.",
        "Putting the phone in another room removes the biggest distraction of all.",
        "Small daily habits usually work better than big plans that never get started.",
    ],
    "zh": [
        "养绿植最常见的问题其实是浇水太多，等表层土干了再浇。",
        "坚持比强度重要，尤其是在刚开始的那段时间。",
        "一双合脚的鞋比其他任何装备都重要。",
        "把手机放到另一个房间，最大的干扰就没了。",
        "每天养成小习惯，往往比定一个很大的计划更有用。",
    ],
    "ja": [
        "観葉植物でいちばん多い失敗は水のやりすぎなので、土が乾いてから水をあげましょう。",
        "最初のうちは、強さよりも続けることのほうが大切です。",
        "足に合った靴は、ほかのどんな道具よりも大事です。",
        "携帯を別の部屋に置くだけで、いちばんの邪魔がなくなります。",
        "大きな計画より、毎日の小さな習慣のほうが続きやすいです。",
    ],
}
PLACES = {
    "en": (
        "Here are a few places worth a visit:\n"
        "- Blue Fin (Seattle): nothing on the menu has peanuts, the staff are careful.\n"
        "- Old Mill Diner (Portland): great food, but most sauces have peanuts.",
        ["Blue Fin (Seattle)", "Old Mill Diner (Portland)"],
    ),
    "zh": (
        "这几家都值得一去：\n- 青禾小馆（杭州）：菜单上没有任何含花生的菜，店员也很细心。\n"
        "- 石板街面馆（成都）：味道很好，但大部分酱汁里都有花生。",
        ["青禾小馆（杭州）", "石板街面馆（成都）"],
    ),
    "ja": (
        "おすすめのお店はこちらです：\n"
        "- 柚子庵（京都）：ピーナッツを使った料理はひとつもありません。\n"
        "- 海風食堂（神戸）：とても美味しいですが、ソースの多くにピーナッツが入っています。",
        ["柚子庵（京都）", "海風食堂（神戸）"],
    ),
}


@pytest.mark.parametrize("language", ["en", "zh", "ja"])
def test_a_list_of_named_places_survives_generic_advice(language: str) -> None:
    """List items that name things (a name, its place) outweigh advice that names nothing."""
    advice, (places, names) = ADVICE[language], PLACES[language]
    texts = [*advice[:2], places, *advice[2:]]
    summary = fold_all([said("assistant", t, n) for n, t in enumerate(texts)], 80, batch=2)
    text = body(summary)
    assert all(name in text for name in names)
    assert sum(line in text for line in advice) <= 1
    assert summary.tokens <= 80


def test_a_fact_keeps_its_speaker_and_its_session_date() -> None:
    entries = [
        said(
            "user", "[Session 3 - 1:56 pm on 8 May, 2023]\nCaroline: Hi Mel! So good to see you!", 0
        ),
        said("assistant", "Melanie: Hey Caroline! Great to see you too!", 1),
        said("user", "Caroline: I went to the LGBTQ support group in Boston yesterday.", 2),
        said("assistant", "Melanie: I ran a 5k charity race last Saturday.", 3),
    ]
    text = body(rolling().fold(None, entries, 200))
    assert text.splitlines() == [
        "[8 May 2023] Caroline: I went to the LGBTQ support group in Boston yesterday.",
        "Melanie: I ran a 5k charity race last Saturday.",
    ]


def test_a_timestamp_in_metadata_dates_the_fact() -> None:
    entry = said(
        "user", "The deploy of v1.8.9 failed on host web-07.", 4, timestamp="2024-08-07T23:30:00Z"
    )
    text = body(rolling().fold(None, [entry], 100))
    assert text == "[2024-08-07] user: The deploy of v1.8.9 failed on host web-07."


def test_tool_results_are_named_after_their_call() -> None:
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_order", "arguments": '{"id": "A-7"}'},
        }
    ]
    entries = [
        make({"role": "assistant", "content": None, "tool_calls": calls}, 0),
        make(
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": "Order A-7 shipped on 3 June with DHL.",
            },
            1,
        ),
    ]
    text = body(rolling().fold(None, entries, 120))
    assert 'assistant: calls get_order({"id": "A-7"})' in text
    assert "tool (get_order): Order A-7 shipped on 3 June with DHL." in text


def test_cut_markers_of_earlier_compression_never_reach_the_summary() -> None:
    long = "The contract number is K-2291 and the renewal date is 1 April 2026. " * 30
    [cut] = Truncate(TOK)([said("user", long, 0)], 80)
    assert "cut by ctxwindow" in cut.message["content"]
    text = body(rolling().fold(None, [cut], 120))
    assert "K-2291" in text and "cut by ctxwindow" not in text


def test_a_summary_without_fold_state_is_read_back_from_its_text() -> None:
    """An older summary (or a model's) has no facts in its metadata: its lines are reread."""
    old = rolling().fold(None, chat(SMALL_TALK_EN, FACTS_EN[:2]), 100)
    stateless = dataclasses.replace(old, metadata={"summarized_ids": ["x"]})
    new = rolling().fold(stateless, [said("user", "Also: the PIN is 7735.", 20)], 100)
    assert "A-1042" in body(new) and "7735" in body(new)
    assert new.metadata["summarized_ids"][0] == "x"


def test_a_summary_of_the_old_form_loses_its_cut_markers() -> None:
    old_text = (
        f"{HEADINGS['en']}\nuser: Order A-1042 ships Friday. …\n"
        "[… 9 chars (3 tokens) cut by ctxwindow …]\nassistant: The $40 refund was approved."
    )
    state = {"facts": [[1, 2]], "dated": [["x", 1]]}  # not a fold's state: the text is read
    old = make({"role": "user", "content": old_text}, -1, kind="summary",
               metadata={"summarized_ids": ["a"], "rolling": state})  # fmt: skip
    new = rolling().fold(old, [said("user", "My PIN is 7735.", 5)], 200)
    assert body(new).splitlines() == [
        "user: Order A-1042 ships Friday.",
        "assistant: The $40 refund was approved.",
        "user: My PIN is 7735.",
    ]


def test_when_full_the_least_dense_goes_first_then_the_oldest() -> None:
    dense = [said("user", f"Ticket T-{n:03} is due on day {n}.", n) for n in range(40)]
    vague = [said("user", "I was thinking about what we could maybe do about all of it.", 40)]
    summary = fold_all(dense + vague, 60)
    text = body(summary)
    assert "thinking" not in text
    kept = [int(n) for n in re.findall(r"T-(\d+)", text)]
    assert kept and kept == sorted(kept) and max(kept) == 39  # the newest stay, in order


def test_a_date_passes_to_the_next_turns_whatever_order_they_are_folded_in() -> None:
    header = said("user", "[Session 1 - 9:00 am on 2 June, 2024]\nAna: My flat is in Porto.", 10)
    later = said("assistant", "Bo: My sister Eva moved to Lyon in 2019.", 11)
    summary = rolling().fold(None, [later], 200)
    assert body(summary) == "Bo: My sister Eva moved to Lyon in 2019."  # no date known yet
    summary = rolling().fold(summary, [header], 200)
    assert body(summary).splitlines() == [
        "[2 June 2024] Ana: My flat is in Porto.",
        "Bo: My sister Eva moved to Lyon in 2019.",
    ]
    assert summary.metadata["rolling"]["facts"][1][4] == "2 June 2024"


def test_the_fold_state_stays_small_however_long_the_history() -> None:
    entries = [
        said("user", f"Order O-{n} of client C{n % 7} ships on day {n}.", n) for n in range(600)
    ]
    summary = fold_all(entries, 120, batch=6)
    state = summary.metadata["rolling"]
    assert len(state["facts"]) < 20 and not state["dated"]
    assert len(state["waiting"]) == MAX_WAITING  # no date ever: the newest wait, boundedly
    assert len(summary.metadata["summarized_ids"]) == 600


# -- the pieces of the work ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "facts"),
    [
        ("Order A-1042 ships on Friday.", {"id:a-1042", "d:friday"}),
        ("We agreed to meet in Lisbon next week.", {"x:agreed", "name:lisbon", "d:next week"}),
        ("我们决定下周三见面。", {"x:决定", "d:下周"}),
        ("田中さんと約束をしました。", {"name:田中さん", "x:約束"}),
        (
            "The deploy failed with HEALTHCHECK_FAILED_503.",
            {"!:failed", "id:healthcheck_failed_503"},
        ),
    ],
)
def test_weigh_finds_the_facts(text: str, facts: set[str]) -> None:
    assert facts <= dict(weigh(text)).keys()


@pytest.mark.parametrize(
    "text",
    ["Hey Mel! Good to see you!", "Thanks, Caroline!", "Wow, Gina, that's gorgeous!",
     "哈哈，谢谢！", "ありがとうございます！", "😂😂😂", "", "   ", "Sounds good, see you then."],
)  # fmt: skip
def test_small_talk_weighs_nothing(text: str) -> None:
    assert weigh(text) == ()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("- 拾味居（厦门）：菜单上没有芒果。", {"name:拾味居", "name:厦门"}),
        ("1. Blue Fin (Seattle): no peanuts.", {"name:blue fin", "name:seattle"}),
        ("・さくら亭（京都）：そばが美味しい。", {"name:さくら亭", "name:京都"}),
        ("推荐 **青禾小馆**，就在西湖边。", {"name:青禾小馆"}),
        ("我在用 Notion 记笔记。", {"name:notion"}),
        ("App 适合入门。", {"name:app"}),  # a Latin word in CJK text, even first
    ],
)
def test_weigh_finds_names_by_how_they_are_written(text: str, names: set[str]) -> None:
    assert names <= dict(weigh(text)).keys()


@pytest.mark.parametrize(
    "text",
    [
        "- pros: it is cheap (mostly)",  # a lowercase head and qualifier name nothing
        "以后我这么叫你别奇怪。",  # 叫 before a pronoun gives no name
        "希望周末之前天气能好起来。",  # 之前天气 holds no 前天; a weekend alone is no date
    ],
)
def test_weigh_finds_no_name_or_date_in_ordinary_words(text: str) -> None:
    assert not {t for t, _ in weigh(text) if t.startswith(("name:", "d:"))}


@pytest.mark.parametrize(
    ("advice", "item"),
    [
        (ADVICE["en"][0], "- Blue Fin (Seattle): nothing on the menu has peanuts."),
        (ADVICE["zh"][0], "- 青禾小馆（杭州）：菜单上没有任何含花生的菜。"),
        (ADVICE["ja"][0], "- 柚子庵（京都）：ピーナッツを使った料理はありません。"),
        ("每天练十五分钟，比一周集中学两个小时效果好。", "我养了一只猫，叫汤圆。"),
    ],
)
def test_generic_advice_weighs_less_per_token_than_what_names_things(
    advice: str, item: str
) -> None:
    def density(text: str) -> float:
        return sum(w for _, w in weigh(text)) / TOK.text(text)

    assert density(advice) < density(item)


def test_a_question_weighs_half_and_many_numbers_count_less() -> None:
    statement, question = dict(weigh("The room is 42.")), dict(weigh("Is the room 42?"))
    assert question["n:42"] == statement["n:42"] / 2
    series = dict(weigh("Values: 11, 12, 13, 14, 15, 16."))
    assert series["n:11"] == 2.0 and series["n:16"] == 0.5


def test_dates_of_headers_and_timestamps() -> None:
    assert header_date("[Session 3 - 1:56 pm on 8 May, 2023]") == "8 May 2023"
    assert header_date("[May 8, 2023 at noon]") == "May 8 2023"
    assert header_date("[2023/05/20 (Sat) 02:21]") == "2023/05/20"
    assert header_date("[2023年5月8日]") == "2023年5月8日"
    assert header_date("[URGENT]") is None
    assert timestamp_date("2024-05-01T23:30:00-02:00") == "2024-05-02"
    assert timestamp_date(0) == "1970-01-01"
    assert timestamp_date(float("nan")) is None and timestamp_date(True) is None


def test_a_long_sentence_is_cut_into_pieces_that_fit() -> None:
    reader = TurnReader(TOK.text, max_tokens=12)
    sentence = "we went to " + ", then ".join(f"town number {n}" for n in range(30))
    pieces = list(reader.pieces(sentence, "下一单：" + "订单号220186848339，" * 12))
    assert len(pieces) > 10 and all(TOK.text(p.text) <= 12 for p in pieces)
    assert "town number 29" in " ".join(p.text for p in pieces)


def test_json_records_are_cut_between_records() -> None:
    """A record is one fact: a host and its failed deploy stay in one piece."""
    reader = TurnReader(TOK.text, max_tokens=24)
    records = [
        {"host": f"web-{n:02}", "zone": "eu-west-1a", "status": "failed" if n == 7 else "ok"}
        for n in range(12)
    ]
    pieces = [p.text for p in reader.pieces(json.dumps({"hosts": records}))]
    assert any("web-07" in p and "failed" in p for p in pieces)
    assert all(p.count('"host"') <= 1 for p in pieces)


def test_a_cjk_line_ending_in_a_colon_is_no_speaker() -> None:
    reader = TurnReader(TOK.text)
    message = {"role": "assistant", "content": "这几家都值得一去：\n- 青禾小馆（杭州）"}
    assert reader.speaker_and_text(message, {})[0] == "assistant"
    named = {"role": "user", "content": "小明：我住在杭州。"}
    assert reader.speaker_and_text(named, {}) == ("小明", "我住在杭州。")


def test_calendar_passes_dates_along_unbroken_runs_only() -> None:
    calendar = Calendar()
    calendar.add([(7, None), (5, None), (9, None)])
    calendar.add([(4, "8 May 2023")])
    assert [calendar.date(s) for s in (4, 5, 6, 7)] == ["8 May 2023", "8 May 2023", None, None]
    calendar.add([(6, None)])
    assert calendar.date(7) == "8 May 2023" and calendar.date(9) is None
    again = Calendar.from_state(calendar.state())
    again.add([(8, None)])
    assert again.date(9) == "8 May 2023"


# -- properties ----------------------------------------------------------------------

SCRIPTS = [
    "Order A-1042 ships Friday.", "我们决定下周三在上海见面。", "田中さんは3200円払いました。",
    "haha 😂🎉", "Thanks!", "", "   ", "\n\n", "é" * 50, "ok… fine…", "Meeting at 10:30 in Room 4B",
    "[Session 2 - 2:32 pm on 29 January, 2023]\nGina: I launched an ad campaign.",
    "Caroline: We agreed to adopt. [shares a photo: a dog]",
    "\n[… 839 chars (124 tokens) cut by ctxwindow …]\n",
]  # fmt: skip
texts = st.one_of(
    st.lists(st.sampled_from(SCRIPTS), max_size=6).map(" ".join),
    st.lists(st.sampled_from(SCRIPTS[:4]), min_size=30, max_size=120).map("".join),  # one long line
    st.text(max_size=300),
)


@st.composite
def batches(draw: st.DrawFn) -> list[list[Entry]]:
    roles = st.sampled_from(["user", "assistant"])
    entries = [
        said(draw(roles), draw(texts), seq)
        for seq in draw(st.permutations(range(draw(st.integers(1, 14)))))
    ]
    cuts = sorted(draw(st.sets(st.integers(1, len(entries)), max_size=4)) | {len(entries)})
    return [entries[a:b] for a, b in zip([0, *cuts], cuts, strict=False) if a < b]


def marker_only(line: str) -> bool:
    rest = re.sub(r"^(\[[^\]]*\] )?[^:：]{1,40}?[:：] ", "", line)
    return bool(MARKER_ONLY.fullmatch(rest))


@settings(max_examples=60, deadline=None)
@given(batches(), st.integers(20, 400))
def test_property_within_cap_deterministic_and_no_marker_lines(
    folds: list[list[Entry]], budget: int
) -> None:
    summary = None
    for batch in folds:
        first = rolling().fold(summary, batch, budget)
        second = rolling().fold(summary, batch, budget)
        assert first.message == second.message and first.metadata == second.metadata
        assert first.tokens == TOK.message_tokens(first.message) <= budget
        text = body(first)
        assert "cut by ctxwindow" not in text
        assert not any(marker_only(line) for line in text.splitlines())
        summary = first
    assert summary is not None
    assert summary.metadata["summarized_ids"] == [e.id for batch in folds for e in batch]


# -- what the summary draws on -------------------------------------------------------


def pieces_of(entry: Entry) -> list[str]:
    return [p.text for p in TurnReader(TOK.text).read(entry, {}).pieces]


def test_the_summary_draws_on_the_messages_its_facts_come_from() -> None:
    entries = chat(SMALL_TALK_EN, FACTS_EN)
    summary = fold_all(entries, 110)
    text = body(summary)
    drawn = summary.metadata["draws_on"]
    facts = {e.id for e in entries if e.message["content"] in FACTS_EN}
    assert drawn and set(drawn) <= facts, "small talk is never drawn on"
    for entry in entries:
        shown = any(piece in text for piece in pieces_of(entry))
        assert shown == (entry.id in drawn), entry.message["content"]
    assert drawn == sorted(drawn, key=[e.id for e in entries].index), "in conversation order"


def test_a_fact_a_later_fold_drops_leaves_draws_on_and_the_state_stays_small() -> None:
    entries = [said("user", f"Order O-{n} of client C{n % 7} ships on day {n}.", n)
               for n in range(300)]  # fmt: skip
    fold = rolling().fold
    first = fold(None, entries[:6], 120)
    assert first.metadata["draws_on"] == [e.id for e in entries[:6] if f"O-{e.seq} " in body(first)]
    summary = first
    for start in range(6, 300, 6):
        summary = fold(summary, entries[start : start + 6], 120)
        drawn = summary.metadata["draws_on"]
        assert drawn == [e.id for e in entries if f"O-{e.seq} " in body(summary)]
    assert not set(first.metadata["draws_on"]) & set(summary.metadata["draws_on"])
    state = summary.metadata["rolling"]
    assert len(state["ids"]) == len(summary.metadata["draws_on"]) < 20
    # As a checkpoint holds it (JSON), the state gives the next fold the same ids.
    plain = {k: v for k, v in summary.metadata.items() if k != "summarized_ids"}
    resumed = dataclasses.replace(summary, metadata=json.loads(json.dumps(plain)))
    more = [said("user", f"Order O-{n} of client C{n % 7} ships on day {n}.", n)
            for n in range(300, 306)]  # fmt: skip
    assert (
        fold(resumed, more, 120).metadata["draws_on"]
        == fold(summary, more, 120).metadata["draws_on"]
    )


def llm_fold(old: Entry | None, evicted: list[Entry], reply: str) -> Entry:
    """A fold by a model that replies ``reply``."""
    with LLMSummarizer(FakeModel(reply=reply), TOK) as model:
        return asyncio.run(RollingSummary(model).afold(old, evicted, 60))


PAD = " Thanks, that sounds great!" * 12  # over the fold's budget: the model is asked


def test_a_models_summary_draws_on_the_messages_whose_marks_it_holds() -> None:
    first = [
        said("user", "Order A-1042 ships to Oslo on Friday." + PAD, 0),
        said("assistant", "Caroline moved to Oslo last year." + PAD, 1),
        said("user", "Ticket T-881 is blocked." + PAD, 2),
        said("assistant", "Haha thanks 😂" + PAD, 3),
    ]
    summary = llm_fold(None, first, "Order A-1042 ships to Oslo.")
    assert summary.metadata["compressed"]["by"] == "rolling(llm)"
    assert summary.metadata["draws_on"] == [first[0].id], "Oslo is the first message's"
    later = [said("user", "Caroline adopted a dog named Rex." + PAD, 4)]
    summary = llm_fold(summary, later, "A-1042 to Oslo; Caroline adopted Rex.")
    assert summary.metadata["draws_on"] == [first[0].id, later[0].id]
    summary = llm_fold(summary, [said("user", "Nothing new here, really." + PAD, 5)], "Rex.")
    assert summary.metadata["draws_on"] == [later[0].id], "A-1042 left the text: so did it"


def test_a_models_summary_after_an_extractive_one_reads_what_that_one_drew_on() -> None:
    entries = chat(SMALL_TALK_EN, FACTS_EN)
    extractive = fold_all(entries, 110)
    later = [said("user", "Meeting at 10:30 in Room 4B." + PAD, 40)]
    summary = llm_fold(extractive, later, "ana.lima@example.com; Room 4B at 10:30.")
    assert summary.metadata["compressed"]["by"] == "rolling(llm)"
    invoice = next(e for e in entries if "invoice" in str(e.message["content"]))
    assert summary.metadata["draws_on"] == [invoice.id, later[0].id]


def test_credit_gives_a_mark_to_one_message_and_wants_two_words_without_one() -> None:
    sources = [
        ("a", "Caroline went camping in June."),
        ("b", "Caroline loves painting."),
        ("c", "The ceramic tiles arrived cracked."),
        ("d", "The tiles are blue."),
        ("e", "我们决定下周三在上海见面。"),
        ("f", "👍🎉"),
    ]
    text = "Caroline: camping; ceramic tiles cracked. 下周三在上海见面。 👍🎉"
    credits = credit(text, None, sources)
    assert credited_ids(credits) == ["a", "c", "e"]
    assert credit("Caroline.", credits, ()) == [["caroline", "a"]]
    assert credit("Order A-10421.", None, [("x", "Order A-1042 shipped.")]) == []
