"""Compressors: one signature, entries and a target in, entries out (ctxwindow.compress)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ctxwindow.compress
from ctxwindow.compress import (
    Chain,
    CompressionError,
    Compressor,
    Extractive,
    Structured,
    Truncate,
    extractive,
    split_sentences,
    total_tokens,
)
from ctxwindow.compress.sentences import cjk_share, terms
from ctxwindow.messages import Entry
from tests.support.compress import INCIDENT, TOK, call, make, snapshot, texts, tool, user


def compressors() -> list[Compressor]:
    return [
        Truncate(TOK),
        Extractive(TOK),
        Structured(TOK),
        Chain(Structured(TOK), Extractive(TOK), Truncate(TOK)),
    ]


def content(entry: Entry) -> str:
    text = entry.message["content"]
    assert isinstance(text, str)
    return text


def test_public_names_are_exported_and_sorted() -> None:
    names = ctxwindow.compress.__all__
    assert names == sorted(set(names))
    assert all(hasattr(ctxwindow.compress, name) for name in names)


def test_every_compressor_satisfies_the_protocol() -> None:
    for compressor in compressors():
        assert isinstance(compressor, Compressor)
        assert compressor.name


# -- sentences --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("Pi is 3.14 today. Next.", ["Pi is 3.14 today.", "Next."]),
        ("It costs $1,299.99 now. Ok.", ["It costs $1,299.99 now.", "Ok."]),
        ("Use tools, e.g. a hammer. Done.", ["Use tools, e.g. a hammer.", "Done."]),
        ("That is, i.e. the end. Fine.", ["That is, i.e. the end.", "Fine."]),
        ("Dr. Smith met Mr. Jones. Bye.", ["Dr. Smith met Mr. Jones.", "Bye."]),
        ("J. K. Rowling wrote it. Next one?", ["J. K. Rowling wrote it.", "Next one?"]),
        ('He said "no." Then left.', ['He said "no."', "Then left."]),
        ("Visit example.com. Then call.", ["Visit example.com.", "Then call."]),
        ("Wait... really?! Yes.", ["Wait...", "really?!", "Yes."]),
        ("今天下雨了。我们明天再去！好吗？", ["今天下雨了。", "我们明天再去！", "好吗？"]),
        ("第一；第二……第三", ["第一；", "第二……", "第三"]),
        ("（注意！）然后继续。", ["（注意！）", "然后继续。"]),
        ("「行こう。」と彼は言った。", ["「行こう。」", "と彼は言った。"]),
        (
            "今日は晴れです。明日は雨でしょう！本当？",
            ["今日は晴れです。", "明日は雨でしょう！", "本当？"],
        ),
        ("Hello world. 这是中文。Next one.", ["Hello world.", "这是中文。", "Next one."]),
        ("完成。Next step. 次へ！", ["完成。", "Next step.", "次へ！"]),
        ("I love it 😍! See you 👋. Bye", ["I love it 😍!", "See you 👋.", "Bye"]),
        ("🎉🎉 Party time 🎉", ["🎉🎉 Party time 🎉"]),
        ("- first item\n- second item\n\n• a • b", ["- first item", "- second item", "• a", "• b"]),
        ("Title\nBody line one. Body two.", ["Title", "Body line one.", "Body two."]),
        ("", []),
        ("   \n  ", []),
    ],
)
def test_sentence_splitting(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_scoring_terms_are_words_and_cjk_bigrams() -> None:
    assert terms("The cluster FAILED at 03:14") == ["cluster", "failed", "03:14"]
    assert terms("東京都") == ["東京", "京都"]
    assert terms("猫") == ["猫"]
    assert terms("用Python写") == ["用", "python", "写"]
    assert cjk_share("中文 text") == pytest.approx(2 / 6)


# -- truncate ---------------------------------------------------------------------


def test_truncate_marks_chars_and_tokens_and_hits_the_target() -> None:
    entry = user("alpha beta gamma delta " * 200)
    [out] = Truncate(TOK)([entry], 80)
    assert out.tokens <= 80
    assert out.tokens == TOK.message_tokens(out.message)
    found = re.search(r"\[… (\d+) chars \((\d+) tokens\) cut by ctxwindow …\]", content(out))
    assert found and int(found.group(1)) > 0 and int(found.group(2)) > 0
    assert content(out).startswith("alpha beta") and content(out).rstrip().endswith("delta")


def test_truncate_spreads_the_target_in_proportion_to_sizes() -> None:
    big, small = user("word " * 600, 0), user("word " * 200, 1)
    target = (big.tokens + small.tokens) // 2
    out = Truncate(TOK)([big, small], target)
    assert total_tokens(out) <= target
    assert out[0].tokens > out[1].tokens
    assert out[0].tokens / big.tokens == pytest.approx(out[1].tokens / small.tokens, abs=0.1)


def test_truncate_leaves_what_it_cannot_cut() -> None:
    parts = make({"role": "user", "content": [{"type": "text", "text": "x " * 300}]})
    bare = call()
    out = Truncate(TOK)([parts, bare], 10)
    assert out[0] is parts and out[1] is bare


def test_truncate_rejects_a_bad_head_share() -> None:
    with pytest.raises(CompressionError, match="head_share"):
        Truncate(TOK, head_share=1.5)


@pytest.mark.parametrize("head_share", [0.0, 0.8, 1.0])
def test_truncate_head_share(head_share: float) -> None:
    text = "".join(f"<{i}>" for i in range(400))
    [out] = Truncate(TOK, head_share=head_share)([user(text)], 60)
    assert out.tokens <= 60
    assert content(out).startswith("<0>") == (head_share > 0)
    assert content(out).endswith("<399>") == (head_share < 1)


# -- extractive -------------------------------------------------------------------


def kept_sentences(text: str) -> list[str]:
    return [s for s in re.split(r"\s*…\s*", text) if s]


def test_extractive_keeps_informative_sentences_in_order_within_target() -> None:
    entry = user(INCIDENT)
    [out] = Extractive(TOK)([entry], 35)
    assert out.tokens <= 35
    text = content(out)
    assert "E4021" in text and "kappa-7" in text
    assert "Thanks again" not in text
    positions = [INCIDENT.index(s) for s in kept_sentences(text)]
    assert positions == sorted(positions)


def test_extractive_reads_no_text_when_no_share_can_hold_a_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thousand short turns cut to a few hundred tokens (a rolling summary's precut of a
    big step): each turn's share is below a sentence and its marks, so every turn is left
    as it is, and none is read."""
    batch = [user(f"Order {i} left the depot. It is on its way 🚚.", seq=i) for i in range(1000)]

    def unread(content: Any) -> None:
        raise AssertionError("a text was read")

    monkeypatch.setattr(extractive._Text, "of", staticmethod(unread))
    out = Extractive(TOK)(batch, 800)
    assert all(a is b for a, b in zip(out, batch, strict=True)) and len(out) == len(batch)


@given(
    st.lists(
        st.builds(lambda text, n: user(text or "x", n), texts(), st.integers(0, 9)), max_size=40
    ),
    st.integers(-10, 400),
)
def test_extractive_leaves_unread_only_what_it_would_leave_as_it_is(
    batch: list[Entry], target: int
) -> None:
    """The shortcut above changes nothing: the same entries come out as when every text is
    read and cut."""
    fast = Extractive(TOK)(batch, target)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Extractive, "_too_small", lambda self, rooms, eligible: False)
        assert Extractive(TOK)(batch, target) == fast


def test_extractive_marks_omissions() -> None:
    [out] = Extractive(TOK)([user(INCIDENT)], 45)
    text = content(out)
    assert " … " in text  # a gap between kept sentences
    assert text.startswith("… ")  # the first sentence ("Thanks for your message.") went


def test_extractive_prefers_rare_content_over_boilerplate_in_chinese() -> None:
    text = (
        "我们今天讨论了项目进度。服务器在凌晨三点崩溃了，错误代码是E503！"
        "请在周五之前修复。谢谢大家。谢谢大家的耐心。"
    )
    entry = user(text)
    [out] = Extractive(TOK)([entry], entry.tokens - 15)
    assert out.tokens <= entry.tokens - 15
    assert "E503" in content(out)
    assert "谢谢大家的耐心" not in content(out)


def test_extractive_is_deterministic() -> None:
    entries = [user(INCIDENT, 0), user(INCIDENT.replace("kappa-7", "omega-9"), 1)]
    first = Extractive(TOK)(entries, 80)
    second = Extractive(TOK)(entries, 80)
    assert [e.message for e in first] == [e.message for e in second]


def test_extractive_leaves_a_text_it_cannot_cut_by_sentences() -> None:
    one_sentence = user("word " * 300)
    assert Extractive(TOK)([one_sentence], 50)[0] is one_sentence


def test_extractive_idf_spans_all_entries() -> None:
    """A sentence repeated in every message is boilerplate, however rare its words."""
    footer = "Contact Zendaya support via the portal."
    entries = [user(f"{footer} Order {n} shipped to warehouse W{n}. {footer}", n) for n in range(4)]
    out = Extractive(TOK)(entries, total_tokens(entries) - 20)
    assert all(f"W{n}" in content(e) for n, e in enumerate(out))


# -- structured -------------------------------------------------------------------


def records(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "uuid": f"123e4567-e89b-12d3-a456-{i:012d}",
            "name": f"user{i}",
            "bio": "lorem ipsum dolor sit amet " * 10,
            "status": "error" if i == 500 else "ok",
            "error": "disk full" if i == 500 else None,
        }
        for i in range(n)
    ]


def test_structured_summarises_an_array_of_a_thousand_records() -> None:
    document = {"status": "ok", "request_id": "req-77", "data": {"items": records(1000)}}
    entries = [call(), tool(json.dumps(document, indent=2))]
    out = Structured(TOK)(entries, 600)
    assert out[0] is entries[0]
    assert total_tokens(out) <= 600
    value = json.loads(content(out[1]))
    assert value["_tool"] == "list_users"
    assert value["status"] == "ok" and value["request_id"] == "req-77"
    items = value["data"]["items"]
    assert items["_len"] == 1000
    assert [item["id"] for item in items["_first"]] == [0, 1, 2]
    assert items["_first"][0]["uuid"] == "123e4567-e89b-12d3-a456-000000000000"
    assert items["_errors"][0]["_index"] == 500
    assert items["_errors"][0]["error"] == "disk full"


def test_structured_shrinks_progressively_and_keeps_ids_and_errors() -> None:
    document = {"ok": False, "error": {"code": "E42", "message": "quota exceeded"}}
    document |= {"job_id": "job-9", "trace": ["frame " * 30] * 40, "items": records(50)}
    entry = tool(json.dumps(document))
    sizes = []
    for target in (2000, 600, 300, 150):
        [out] = Structured(TOK)([entry], target)
        value = json.loads(content(out))
        assert value["ok"] is False and value["job_id"] == "job-9"
        assert value["error"] == {"code": "E42", "message": "quota exceeded"}
        sizes.append(out.tokens)
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] <= 150


def test_structured_recurses_into_nested_objects() -> None:
    document = {
        "result": {"user": {"userId": "u-1", "profile": {"about": "x" * 5000, "state": "active"}}}
    }
    [out] = Structured(TOK)([tool(json.dumps(document))], 150)
    user_value = json.loads(content(out))["result"]["user"]
    assert user_value["userId"] == "u-1"
    assert user_value["profile"]["state"] == "active"
    assert user_value["profile"]["about"].endswith("chars]")
    assert out.tokens <= 150


def test_structured_reads_fenced_json_and_metadata_names() -> None:
    body = json.dumps({"status": "done", "rows": list(range(500))})
    entry = make(
        {"role": "tool", "tool_call_id": "c9", "content": f"```json\n{body}\n```"},
        metadata={"tool_name": "query_db"},
    )
    [out] = Structured(TOK)([entry], 60)
    value = json.loads(content(out))
    assert value == {
        "_tool": "query_db",
        "status": "done",
        "rows": {"_len": 500, "_first": [0, 1, 2]},
    }


@pytest.mark.parametrize(
    "entry",
    [
        tool('{"status": "ok", "rows": [1, 2, 3' + ", 4" * 500),  # malformed
        tool("plain text output " * 100),
        tool('"a JSON string ' + "x" * 2000 + '"'),
        user(json.dumps({"rows": list(range(1000))})),  # JSON, but not a tool output
    ],
    ids=["malformed", "text", "scalar", "not-a-tool"],
)
def test_structured_does_not_apply_to_anything_else(entry: Entry) -> None:
    assert Structured(TOK)([entry], 20)[0] is entry


def test_structured_rejects_bad_limits() -> None:
    with pytest.raises(CompressionError, match="max_items"):
        Structured(TOK, max_items=-1)


@pytest.mark.parametrize(("max_items", "max_string"), [(0, 1), (1, 8), (5, 1000)])
def test_structured_limits_shape_the_output(max_items: int, max_string: int) -> None:
    entry = tool(json.dumps({"status": "ok", "items": records(50)}))
    [out] = Structured(TOK, max_items=max_items, max_string=max_string)([entry], entry.tokens - 1)
    items = json.loads(content(out))["items"]
    assert items["_len"] == 50 and len(items.get("_first", [])) <= max_items


def test_structured_returns_its_smallest_form_when_the_target_is_out_of_reach() -> None:
    entry = tool(json.dumps({"status": "ok", "request_id": "r" * 40, "items": records(100)}))
    [out] = Structured(TOK)([entry], 5)
    assert 5 < out.tokens < entry.tokens
    assert json.loads(content(out))["items"]["_len"] == 100


# -- chain ------------------------------------------------------------------------


class Recorder:
    """A compressor that logs its calls and returns a fixed size."""

    def __init__(self, name: str, size: int, log: list[str]) -> None:
        self.name, self.size, self.log = name, size, log

    def __call__(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]:
        self.log.append(self.name)
        return [dataclasses.replace(entries[0], tokens=self.size)]


def test_chain_tries_in_order_and_stops_at_the_first_within_target() -> None:
    log: list[str] = []
    chain = Chain(Recorder("a", 90, log), Recorder("b", 40, log), Recorder("c", 10, log))
    out = chain([user("x " * 100)], 50)
    assert log == ["a", "b"] and out[0].tokens == 40
    assert chain.name == "chain(a,b,c)"


def test_chain_returns_the_smallest_result_when_none_fits() -> None:
    log: list[str] = []
    chain = Chain(Recorder("a", 90, log), Recorder("b", 70, log), Recorder("c", 80, log))
    assert chain([user("x " * 100)], 50)[0].tokens == 70
    assert log == ["a", "b", "c"]


def test_chain_falls_through_compressors_that_do_not_apply() -> None:
    chain = Chain(Structured(TOK), Extractive(TOK), Truncate(TOK))
    [prose] = chain([user(INCIDENT)], 40)
    [blob] = chain([user("word " * 400)], 40)
    [data] = chain([call(), tool(json.dumps({"status": "ok", "rows": list(range(900))}))], 60)[1:]
    assert prose.metadata["compressed"]["by"] == "extractive"
    assert blob.metadata["compressed"]["by"] == "truncate"
    assert data.metadata["compressed"]["by"] == "structured"


def test_chain_is_a_compressor_and_needs_one() -> None:
    inner = Chain(Extractive(TOK), Truncate(TOK))
    outer = Chain(Structured(TOK), inner)
    assert (
        isinstance(outer, Compressor)
        and outer.name == "chain(structured,chain(extractive,truncate))"
    )
    [out] = outer([user("word " * 400)], 40)
    assert out.tokens <= 40
    with pytest.raises(CompressionError):
        Chain()


# -- the contract, for every compressor ---------------------------------------------


def conversation() -> list[Entry]:
    document = {"status": "ok", "items": records(200)}
    return [
        make({"role": "user", "content": INCIDENT}, 0, pinned=True, priority=3, kind="note"),
        call(content="Let me look that up. " + INCIDENT),
        tool(json.dumps(document), seq=2),
        make({"role": "assistant", "name": "bot", "content": "word " * 300}, 3, metadata={"k": 1}),
    ]


@pytest.mark.parametrize("compressor", compressors(), ids=lambda c: c.name)
def test_compressors_return_new_entries_and_keep_their_fields(compressor: Compressor) -> None:
    entries = conversation()
    before = snapshot(entries)
    out = compressor(entries, total_tokens(entries) // 3)
    assert snapshot(entries) == before
    assert len(out) == len(entries)
    changed = 0
    for old, new in zip(entries, out, strict=True):
        if new is old:
            continue
        changed += 1
        for field in ("seq", "id", "pinned", "priority", "kind", "created_at"):
            assert getattr(new, field) == getattr(old, field)
        assert new.tokens == TOK.message_tokens(new.message) < old.tokens
        assert {k: v for k, v in new.message.items() if k != "content"} == {
            k: v for k, v in old.message.items() if k != "content"
        }
        record = new.metadata["compressed"]
        assert record["by"] in compressor.name  # a chain records the compressor that won
        assert record == {"by": record["by"], "from_tokens": old.tokens, "to_tokens": new.tokens}
        assert new.metadata == {**old.metadata, "compressed": record}
    assert changed


@pytest.mark.parametrize("compressor", compressors(), ids=lambda c: c.name)
def test_compressors_leave_entries_within_target_alone(compressor: Compressor) -> None:
    entries = conversation()
    out = compressor(entries, total_tokens(entries))
    assert all(new is old for new, old in zip(out, entries, strict=True))


# -- properties -------------------------------------------------------------------


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=60),
    lambda children: (
        st.lists(children, max_size=12)
        | st.dictionaries(
            st.sampled_from(["id", "status", "error", "data", "rows", "note", "x_id"]),
            children,
            max_size=6,
        )
    ),
    max_leaves=60,
)


@st.composite
def messages(draw: st.DrawFn) -> list[Entry]:
    entries = []
    for seq in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "assistant", "tool", "json", "call"]))
        if kind == "json":
            body = json.dumps(draw(json_values), ensure_ascii=draw(st.booleans()))
            entries.append(tool(body, call_id=f"c{seq}", seq=seq))
        elif kind == "tool":
            entries.append(tool(draw(texts()), call_id=f"c{seq}", seq=seq))
        elif kind == "call":
            entries.append(
                dataclasses.replace(call(content=draw(texts()), call_id=f"c{seq}"), seq=seq)
            )
        else:
            entries.append(make({"role": kind, "content": draw(texts())}, seq))
    return entries


@given(entries=messages(), share=st.floats(0.0, 1.2), which=st.integers(0, 3))
def test_property_compressors_never_grow_mutate_or_reshape(
    entries: list[Entry], share: float, which: int
) -> None:
    compressor = compressors()[which]
    before = snapshot(entries)
    target = int(total_tokens(entries) * share)
    out = compressor(entries, target)
    assert snapshot(entries) == before
    assert total_tokens(out) <= total_tokens(entries)
    assert len(out) == len(entries)
    for old, new in zip(entries, out, strict=True):
        assert new.message["role"] == old.message["role"]
        assert new.message.get("tool_call_id") == old.message.get("tool_call_id")
        assert new.message.get("tool_calls") == old.message.get("tool_calls")
        assert new.tokens == TOK.message_tokens(new.message)
        if new is not old and new.metadata["compressed"]["by"] == "structured":
            json.loads(content(new))


@given(st.text(max_size=200))
def test_cjk_share_counts_like_the_character_definition(text: str) -> None:
    from ctxwindow.compress.sentences import cjk_share, is_cjk

    letters = [ch for ch in text if ch.isalnum()]
    expected = sum(map(is_cjk, letters)) / len(letters) if letters else 0.0
    assert cjk_share(text) == expected
