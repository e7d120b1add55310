"""The archive contract, run against every backend: SQLite FTS5 and PostgreSQL.

PostgreSQL tests use ``CTXWINDOW_TEST_POSTGRES_URL`` (default
``postgresql://127.0.0.1:5432/test``) and skip when it cannot be reached,
unless ``CTXWINDOW_REQUIRE_SERVERS=1`` makes that a failure. Each test gets
its own table, dropped afterwards.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwindow import Entry, StoreError, StoreUnavailableError
from ctxwindow.archive import (
    Archive,
    Embedder,
    Hit,
    PostgresArchive,
    SQLiteArchive,
    reciprocal_rank_fusion,
    vectors,
)
from ctxwindow.archive.base import Ranked, fuse_scores
from tests.support.archives import MakeArchive

from .support.two_forms import TwoForms


class ConceptEmbedder:
    """A deterministic test embedder: words → concepts → hashed into 256 signed dimensions.

    Synonyms share a concept, so a paraphrase with no word in common with a
    message still lands next to it, as with a real sentence model.
    """

    dim = 256
    CONCEPTS: ClassVar[dict[str, str]] = {
        "parcel": "PARCEL",
        "package": "PARCEL",
        "order": "PARCEL",
        "ships": "SEND",
        "dispatched": "SEND",
        "sent": "SEND",
        "monday": "DAY",
        "when": "DAY",
        "dog": "PET",
        "puppy": "PET",
        "cat": "PET",
    }

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            concept = self.CONCEPTS.get(word, word)
            digest = hashlib.blake2b(concept.encode(), digest_size=4).digest()
            index = int.from_bytes(digest[:2], "big") % self.dim
            vector[index] += 1.0 if digest[2] % 2 else -1.0
        return vector  # not normalized on purpose: the archive normalizes


@pytest.fixture
def postgres_archive(postgres_url: str) -> Iterator[PostgresArchive]:
    """A fresh PostgresArchive on its own table, dropped afterwards."""
    archive = PostgresArchive(postgres_url, table=f"ctxwindow_archive_test_{uuid.uuid4().hex[:12]}")
    yield archive
    archive.drop()
    archive.close()


def entries(*texts: str, start: int = 1) -> list[Entry]:
    return [
        Entry({"role": "user", "content": text}, tokens=len(text), seq=start + i)
        for i, text in enumerate(texts)
    ]


def contents(hits: list[Hit]) -> list[str]:
    return [hit.entry.message["content"] for hit in hits]


STORY = (
    "Hi! How are you doing today?",
    "The parcel ships on Monday from the Lisbon warehouse.",
    "I prefer green tea over coffee in the morning.",
    "我们的退货政策是三十天内无理由退货。",
    "我住在东京，离车站很近。",
    "明日、東京の倉庫から配達します。",
    "Party tonight 🎉 at Maria's place, bring snacks 🍕",
    "Our team finished shipping the new release yesterday.",
    "The weather is lovely, let's go for a walk.",
    "Meeting at 東京駅 at 3pm, then dinner in Shinjuku.",
)


@pytest.fixture
def story(make_archive: MakeArchive) -> Archive:
    archive = make_archive()
    archive.index("s1", entries(*STORY))
    return archive


# Lexical search: English stemming, CJK, emoji.


@pytest.mark.parametrize("query", ["shipped", "ship", "shipping", "ships"])
def test_english_words_match_their_inflections(story: Archive, query: str) -> None:
    found = contents(story.search("s1", query))
    assert STORY[1] in found and STORY[7] in found


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("东京", STORY[4]),  # a two-character word: shorter than a trigram
        ("退货政策", STORY[3]),
        ("退货政策是什么？", STORY[3]),
        ("退货", STORY[3]),
    ],
)
def test_chinese_words_are_found(story: Archive, query: str, expected: str) -> None:
    assert contents(story.search("s1", query))[0] == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [("東京", {STORY[5], STORY[9]}), ("配達", {STORY[5]}), ("倉庫", {STORY[5]})],
)
def test_japanese_words_are_found(story: Archive, query: str, expected: set[str]) -> None:
    assert set(contents(story.search("s1", query))) == expected


def test_a_single_cjk_character_is_found(story: Archive) -> None:
    assert contents(story.search("s1", "站")) == [STORY[4]]


def test_simplified_and_japanese_kanji_are_different_characters(story: Archive) -> None:
    """东 (simplified) and 東 (kanji) are distinct code points: no conversion is made."""
    assert STORY[5] not in contents(story.search("s1", "东京"))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("🎉", STORY[6]),
        ("🍕 snacks", STORY[6]),
        ("東京駅 dinner", STORY[9]),
        ("shinjuku", STORY[9]),
    ],
)
def test_emoji_and_mixed_scripts_are_searchable(story: Archive, query: str, expected: str) -> None:
    assert contents(story.search("s1", query))[0] == expected


def test_full_width_and_accented_text_match_plain_forms(make_archive: MakeArchive) -> None:
    archive = make_archive()
    archive.index(
        "s1", entries("Ｏｒｄｅｒ ＡＢＣ１２３ confirmed", "Un café crème, s'il vous plaît")
    )
    assert contents(archive.search("s1", "abc123")) == ["Ｏｒｄｅｒ ＡＢＣ１２３ confirmed"]
    assert contents(archive.search("s1", "cafe creme")) == ["Un café crème, s'il vous plaît"]


FTS_SYNTAX = [
    '"',
    '"unbalanced quote',
    "(",
    "())(",
    "*",
    "ship*",
    "-ship",
    "ship -monday",
    "NEAR",
    "NEAR(ship monday)",
    "ship AND monday",
    "ship OR",
    "AND",
    "NOT tea",
    "body: ship",
    "scope : x",
    "{body scope}: ship",
    "^ship",
    "ship + monday",
    "'; DROP TABLE ctxwindow_archive; --",
    "a & b | !c <-> d:*",
    "\\",
    "''",
    "\x00",
    "",
    "   ",
    "…",
    "🎉🎉🎉",
]


@pytest.mark.parametrize("query", FTS_SYNTAX)
def test_query_syntax_in_user_text_never_raises(story: Archive, query: str) -> None:
    hits = story.search("s1", query)
    assert all(isinstance(hit, Hit) for hit in hits)


def test_syntax_characters_around_words_are_ignored(story: Archive) -> None:
    found = contents(story.search("s1", '"(shipped)*" -NEAR'))
    assert set(found[:2]) == {STORY[1], STORY[7]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=60), query=st.text(max_size=40))
def test_any_text_can_be_indexed_and_any_query_searched(text: str, query: str) -> None:
    with SQLiteArchive() as archive:
        archive.index("s", entries(text))
        assert len(archive.search("s", query, k=3)) <= 1
        assert len(archive.search("s", text, k=3)) <= 1


# Ranking.


def test_the_message_stating_a_fact_ranks_first(make_archive: MakeArchive) -> None:
    archive = make_archive()
    chatter = [f"Sure, sounds good, message number {i} about nothing much." for i in range(30)]
    fact = "My flight to Lisbon leaves on March 3rd at 9am from terminal 2."
    archive.index("s1", entries(*chatter[:15], fact, *chatter[15:]))
    assert contents(archive.search("s1", "When does my flight to Lisbon leave?"))[0] == fact


def test_the_chinese_fact_ranks_first(make_archive: MakeArchive) -> None:
    archive = make_archive()
    fact = "我的航班是三月三日早上九点从二号航站楼起飞。"
    archive.index(
        "s1", entries("你好，今天天气不错。", "我们晚上去吃火锅吧。", fact, "好的，没问题。")
    )
    assert contents(archive.search("s1", "我的航班什么时候起飞？"))[0] == fact


def test_ties_are_broken_by_sequence_number(make_archive: MakeArchive) -> None:
    archive = make_archive()
    same = [
        Entry({"role": "user", "content": "exactly the same words"}, 4, seq) for seq in (5, 2, 9)
    ]
    archive.index("s1", same)
    assert [hit.entry.seq for hit in archive.search("s1", "same words")] == [2, 5, 9]


@pytest.mark.parametrize(
    ("common", "rare"), [("kettle", "zeppelin"), ("火锅", "航班"), ("🍕", "🎉")]
)
def test_a_rare_word_outranks_a_common_one(
    make_archive: MakeArchive, common: str, rare: str
) -> None:
    """BM25's IDF: a word in 1 message of 50 weighs more than one in 40 of 50.

    Each message holds its word once, so a ranking without IDF (``ts_rank``)
    ties them all and puts the first common one first.
    """
    archive = make_archive()
    archive.index(
        "s1",
        entries(
            *(f"{common} on the list, note {i}" for i in range(40)),
            *(f"nothing on the list, note {i}" for i in range(40, 49)),
            f"{rare} on the list, note 49",
        ),
    )
    hits = archive.search("s1", f"{common} {rare}", k=3)
    assert contents(hits) == [f"{rare} on the list, note 49"] + [
        f"{common} on the list, note {i}" for i in range(2)
    ]


def test_equal_rows_score_alike_whatever_the_order_of_terms(make_archive: MakeArchive) -> None:
    """Scores sum over several terms; equal rows must still tie exactly, so seq decides."""
    archive = make_archive()
    words = "red green blue yellow violet"
    archive.index(
        "s1",
        [Entry({"role": "user", "content": words}, 5, seq) for seq in (7, 3, 9, 1)]
        + entries("red alone", start=20),
    )
    hits = archive.search("s1", "violet yellow blue green red", k=10)
    assert [hit.entry.seq for hit in hits] == [1, 3, 7, 9, 20]
    assert len({hit.score for hit in hits[:4]}) == 1
    assert hits[3].score > hits[4].score


def test_k_limits_the_hits(story: Archive) -> None:
    assert len(story.search("s1", "ship", k=1)) == 1
    with pytest.raises(ValueError, match="k must be at least 1"):
        story.search("s1", "ship", k=0)


def test_lexical_only_hits_report_no_dense_rank(story: Archive) -> None:
    hits = story.search("s1", "ship")
    assert [hit.lexical_rank for hit in hits] == list(range(1, len(hits) + 1))
    assert all(hit.dense_rank is None for hit in hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


# Sessions, users, idempotence, forgetting.


def test_hits_are_whole_entries(make_archive: MakeArchive) -> None:
    archive = make_archive()
    entry = Entry(
        {"role": "assistant", "content": [{"type": "text", "text": "Tokyo is sunny 晴れ"}]},
        tokens=7,
        seq=42,
        pinned=True,
        priority=2,
        kind="chat",
        created_at=1714557600.5,
        metadata={"source": "weather", "tags": ["日本"]},
    )
    archive.index("s1", [entry])
    [hit] = archive.search("s1", "sunny")
    assert hit.entry == entry and hit.session_id == "s1"


def test_tool_calls_are_found_by_name_and_arguments(make_archive: MakeArchive) -> None:
    archive = make_archive()
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"city": "Kyoto"}'},
            }
        ],
    }
    archive.index("s1", [Entry(call, 12, 1)])
    assert [hit.entry.seq for hit in archive.search("s1", "kyoto")] == [1]
    assert [hit.entry.seq for hit in archive.search("s1", "lookup_order")] == [1]


def test_sessions_are_isolated(make_archive: MakeArchive) -> None:
    archive = make_archive()
    archive.index("alice", entries("my locker code is 4471"))
    archive.index("bob", entries("my locker code is 9902"))
    assert contents(archive.search("alice", "locker code")) == ["my locker code is 4471"]
    assert contents(archive.search("bob", "locker code")) == ["my locker code is 9902"]
    assert archive.search("carol", "locker code") == []


def test_a_user_wide_search_covers_all_the_users_sessions(make_archive: MakeArchive) -> None:
    archive = make_archive()
    archive.index("s1", entries("the wifi password is hunter2"), user_id="u1")
    archive.index("s2", entries("the garage wifi password is tiger7"), user_id="u1")
    archive.index("s3", entries("the wifi password is other-users-secret"), user_id="u2")
    archive.index("s4", entries("wifi password written without a user"))
    hits = archive.search("s1", "wifi password", user_id="u1")
    assert sorted(hit.session_id for hit in hits) == ["s1", "s2"]
    assert [hit.session_id for hit in archive.search("s1", "wifi password")] == ["s1"]
    # The named session is searched even when it was indexed without the user.
    assert sorted(hit.session_id for hit in archive.search("s4", "wifi", user_id="u1")) == [
        "s1",
        "s2",
        "s4",
    ]


def test_indexing_is_idempotent_per_entry_id(make_archive: MakeArchive) -> None:
    archive = make_archive()
    batch = entries("the dentist appointment is on Friday", "buy oat milk")
    assert archive.index("s1", batch) == 2
    assert archive.index("s1", batch) == 0
    assert archive.index("s1", [*batch, *batch]) == 0
    assert len(archive.search("s1", "dentist friday milk", k=10)) == 2


def test_reindexing_a_changed_entry_replaces_it(make_archive: MakeArchive) -> None:
    archive = make_archive()
    [entry] = entries("call me at 555-0100")
    archive.index("s1", [entry])
    entry.message = {"role": "user", "content": "call me at [REDACTED]"}
    assert archive.index("s1", [entry]) == 1
    assert archive.search("s1", "555") == []
    assert contents(archive.search("s1", "call")) == ["call me at [REDACTED]"]


def test_the_same_entry_id_in_two_sessions_is_two_entries(make_archive: MakeArchive) -> None:
    archive = make_archive()
    [entry] = entries("forked conversation line")
    archive.index("a", [entry])
    archive.index("b", [entry])
    assert archive.forget("a") == 1
    assert contents(archive.search("b", "forked")) == ["forked conversation line"]


def test_forget_removes_a_session_and_only_it(make_archive: MakeArchive) -> None:
    archive = make_archive()
    archive.index("s1", entries("alpha bravo", "alpha charlie"))
    archive.index("s2", entries("alpha delta"))
    assert archive.forget("s1") == 2
    assert archive.search("s1", "alpha") == []
    assert contents(archive.search("s2", "alpha")) == ["alpha delta"]
    assert archive.forget("s1") == 0
    assert archive.index("s1", entries("alpha echo")) == 1


# Entries by sequence number.


def test_at_returns_the_entries_at_those_seqs_in_order(make_archive: MakeArchive) -> None:
    archive = make_archive()
    batch = entries("one", "two", "three", "four", "five", "six")
    archive.index("s1", list(reversed(batch)))
    assert archive.at("s1", [5, 2, 4]) == [batch[1], batch[3], batch[4]]
    assert archive.at("s1", (seq for seq in (3, 3, 1))) == [batch[0], batch[2]]


def test_at_leaves_absent_seqs_out(make_archive: MakeArchive) -> None:
    archive = make_archive()
    batch = entries("one", "two", start=10)
    archive.index("s1", batch)
    assert archive.at("s1", [-1, 0, 11, 12, 99]) == [batch[1]]
    assert archive.at("s1", [1, 2, 3]) == []
    assert archive.at("nobody", [10, 11]) == []


def test_at_never_returns_other_sessions(make_archive: MakeArchive) -> None:
    archive = make_archive()
    mine, theirs = entries("mine 1", "mine 2"), entries("theirs 1", "theirs 2", "theirs 3")
    archive.index("s1", mine, user_id="u1")
    archive.index("s2", theirs, user_id="u1")
    assert archive.at("s1", [1, 2, 3]) == mine
    archive.forget("s1")
    assert archive.at("s1", [1, 2, 3]) == []
    assert archive.at("s2", [3]) == theirs[2:]


def test_at_returns_unicode_entries_whole(make_archive: MakeArchive) -> None:
    archive = make_archive()
    batch = entries("我住在东京", "明日、東京の倉庫から配達します。", "Party 🎉 at 東京駅, café 🍕")
    batch[2].metadata = {"tags": ["日本", "🎉"], "note": "naïve"}
    archive.index("s1", batch)
    assert archive.at("s1", [1, 2, 3]) == batch


def test_at_with_no_seqs_is_empty(make_archive: MakeArchive) -> None:
    archive = make_archive()
    archive.index("s1", entries("one"))
    assert archive.at("s1", []) == []
    assert archive.at("s1", iter(())) == []


@pytest.mark.parametrize("bad", [[2**63], [-(2**63) - 1], ["3"], [1.0], [True]])
def test_at_refuses_seqs_that_are_not_sequence_numbers(
    make_archive: MakeArchive, bad: list[object]
) -> None:
    archive = make_archive()
    archive.index("s1", entries("one"))
    with pytest.raises(ValueError, match="seqs must be integers"):
        archive.at("s1", bad)  # type: ignore[arg-type]


def test_bad_session_ids_are_store_errors(make_archive: MakeArchive) -> None:
    archive = make_archive()
    for bad in ("", "x" * 300):
        with pytest.raises(StoreError):
            archive.index(bad, entries("text"))
        with pytest.raises(StoreError):
            archive.search(bad, "text")
        with pytest.raises(StoreError):
            archive.at(bad, [1])


def test_an_archive_is_a_context_manager(make_archive: MakeArchive) -> None:
    archive = make_archive()
    with archive as same:
        assert same is archive
        same.index("s1", entries("hello there"))
    with pytest.raises(StoreError, match="closed"):
        archive.search("s1", "hello")


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("nul\x00byte inside", "byte"),
        ("tab\tand\nnewline", "newline"),
        ("zero\u200bwidth space", "space"),
        ("RTL עברית text", "עברית"),
        ("flag 🇯🇵 here", "🇯🇵"),
        ("combining e\u0301 accent", "accent"),
    ],
)
def test_awkward_text_round_trips(make_archive: MakeArchive, text: str, query: str) -> None:
    archive = make_archive()
    archive.index("s1", entries(text))
    assert contents(archive.search("s1", query)) == [text]


def test_a_lone_surrogate_is_a_store_error(make_archive: MakeArchive) -> None:
    archive = make_archive()
    with pytest.raises(StoreError, match="cannot be archived"):
        archive.index("s1", entries("broken \ud800 escape"))


def test_unserializable_metadata_is_a_store_error(make_archive: MakeArchive) -> None:
    archive = make_archive()
    [entry] = entries("has an object in its metadata")
    entry.metadata["when"] = object()
    with pytest.raises(StoreError, match="cannot be archived as JSON"):
        archive.index("s1", [entry])


# Dense search and fusion.

PARAPHRASE_DOCS = (
    "The parcel ships on Monday.",
    "I had pasta for lunch yesterday.",
    "The printer on floor two is broken again.",
)


def test_a_paraphrase_with_no_shared_words_is_found_by_meaning(make_archive: MakeArchive) -> None:
    archive = make_archive(embedder=ConceptEmbedder())
    archive.index("s1", entries(*PARAPHRASE_DOCS))
    hits = archive.search("s1", "package dispatched")
    assert contents(hits)[0] == PARAPHRASE_DOCS[0]
    assert hits[0].lexical_rank is None and hits[0].dense_rank == 1
    assert hits[0].score == pytest.approx(0.4)  # the dense share (dense_weight) of a best match


def test_lexical_alone_misses_the_paraphrase(make_archive: MakeArchive) -> None:
    archive = make_archive()
    archive.index("s1", entries(*PARAPHRASE_DOCS))
    assert archive.search("s1", "package dispatched") == []


def test_fusion_reports_both_ranks_and_rewards_agreement(make_archive: MakeArchive) -> None:
    archive = make_archive(embedder=ConceptEmbedder())
    archive.index(
        "s1", entries("my dog loves the beach", "a puppy at the park", "the beach was cold")
    )
    hits = archive.search("s1", "dog beach")
    by_text = {hit.entry.message["content"]: hit for hit in hits}
    both = by_text["my dog loves the beach"]
    assert hits[0] is both
    assert both.lexical_rank == 1 and both.dense_rank == 1
    assert both.score == pytest.approx(1.0)  # the best of both rankings
    assert by_text["a puppy at the park"].lexical_rank is None  # found by meaning only
    assert by_text["a puppy at the park"].dense_rank is not None


class TableEmbedder:
    """Vectors looked up in a table: full control over the dense ranking."""

    dim = 2
    TABLE: ClassVar[dict[str, list[float]]] = {
        "puppy park": [1.0, 0.0],
        "dog food": [0.0, 1.0],
        "walk dog": [1.0, 0.0],
    }

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.TABLE[text] for text in texts]


@pytest.mark.parametrize(
    ("weight", "first"), [(0.5, "puppy park"), (0.3, "dog food"), (0.8, "puppy park")]
)
def test_dense_weight_leans_the_fusion(
    make_archive: MakeArchive, weight: float, first: str
) -> None:
    """The best word match and the best meaning match tie at an even weight (seq decides)."""
    archive = make_archive(embedder=TableEmbedder(), dense_weight=weight)
    archive.index("s1", entries("puppy park", "dog food"))
    hits = archive.search("s1", "walk dog", k=2)
    assert contents(hits) == [first, *({"puppy park", "dog food"} - {first})]
    by_text = {hit.entry.message["content"]: hit for hit in hits}
    assert (by_text["dog food"].lexical_rank, by_text["dog food"].dense_rank) == (1, None)
    assert (by_text["puppy park"].lexical_rank, by_text["puppy park"].dense_rank) == (None, 1)
    assert by_text["puppy park"].score == pytest.approx(weight)
    assert by_text["dog food"].score == pytest.approx(1 - weight)


def test_fusion_keeps_how_much_better_the_best_match_is() -> None:
    """Scores, not ranks: a far weaker second match stays far below the first."""
    lexical = [Ranked(1, 1, 9.0), Ranked(2, 2, 1.0)]
    dense = [Ranked(1, 1, 0.9), Ranked(3, 3, 0.3)]
    fused = {key: score for key, score, _, _ in fuse_scores(lexical, dense, 3, 0.5, 0.2)}
    assert fused[1] == pytest.approx(1.0)
    assert fused[2] == pytest.approx(0.5 / 9)
    assert fused[3] == pytest.approx(0.5 * 0.1 / 0.7)


def test_dense_weight_is_a_share() -> None:
    with pytest.raises(ValueError, match="dense_weight"):
        SQLiteArchive(dense_weight=1.5)


def test_min_similarity_keeps_unrelated_entries_out(make_archive: MakeArchive) -> None:
    archive = make_archive(embedder=ConceptEmbedder(), min_similarity=0.5)
    archive.index("s1", entries(*PARAPHRASE_DOCS))
    assert archive.search("s1", "quantum chromodynamics") == []


@pytest.mark.parametrize("embedder", [None, "concepts"])
def test_a_question_searched_before_its_own_turn_does_not_set_the_scale(
    make_archive: MakeArchive, embedder: str | None
) -> None:
    """Archived as it is asked, a question matches itself best; ``before`` leaves it (and
    what follows) out before ranking, so the real match leads with the best score."""
    archive = make_archive(embedder=ConceptEmbedder() if embedder else None)
    said = ["The package ships on Monday.", "I had pasta for lunch.", "小包は月曜日に発送"]
    question = "when is the package dispatched?"
    archive.index("s1", entries(*said, question, "the package is dispatched 🚚"))
    asked_at = len(said) + 1
    with_itself = archive.search("s1", question, k=3)
    assert contents(with_itself)[0] == question
    hits = archive.search("s1", question, k=3, before=asked_at)
    assert hits and all(hit.entry.seq < asked_at for hit in hits)
    assert contents(hits)[0] == said[0]
    if embedder:  # fused scores are shares of the best match: now the real one
        assert hits[0].score > with_itself[1].score
    with pytest.raises(ValueError, match="before applies to one session"):
        archive.search("s1", question, before=asked_at, user_id="u1")


class TwoFormEmbedder(TwoForms, ConceptEmbedder):
    """An asymmetric model (as E5): passages and queries embedded by their own methods."""


def test_an_asymmetric_model_embeds_replies_as_passages_and_user_turns_as_queries(
    make_archive: MakeArchive,
) -> None:
    """Replies are passages; a user's turns are in the query form, the form questions are
    searched in, and a question archived as a turn is not embedded again to search."""
    embedder = TwoFormEmbedder()
    archive = make_archive(embedder=embedder)
    replies = [
        Entry({"role": "assistant", "content": text}, tokens=len(text), seq=i)
        for i, text in enumerate(PARAPHRASE_DOCS, 1)
    ]
    asked = "did anyone fix the printer?"
    archive.index("s1", [*replies, *entries(asked, start=len(replies) + 1)])
    assert contents(archive.search("s1", "package dispatched"))[0] == PARAPHRASE_DOCS[0]
    archive.search("s1", asked)
    assert embedder.forms == [
        ("passage", list(PARAPHRASE_DOCS)),
        ("query", [asked]),
        ("query", ["package dispatched"]),
    ]
    assert embedder.calls == []  # the symmetric form is not used when both others exist


class OffsetEmbedder(ConceptEmbedder):
    """ConceptEmbedder's vectors plus a large shared component: every cosine sits near 0.9,
    as with models whose unrelated texts already score high (multilingual-e5)."""

    def _vector(self, text: str) -> list[float]:
        vector = ConceptEmbedder()._vector(text)
        norm = sum(x * x for x in vector) ** 0.5 or 1.0
        return [x / norm for x in vector] + [3.0]

    dim = ConceptEmbedder.dim + 1


def test_a_model_whose_unrelated_texts_score_high_is_not_flattened(
    make_archive: MakeArchive,
) -> None:
    filler = [f"note {i} about the weather in spring" for i in range(30)]
    docs = [*filler, "The parcel ships on Monday."]
    plain = make_archive(embedder=ConceptEmbedder())
    offset = make_archive(embedder=OffsetEmbedder())
    for archive in (plain, offset):
        archive.index("s1", entries(*docs))
    query = vectors.unit(OffsetEmbedder()._vector("package dispatched"))
    notes = [vectors.unit(OffsetEmbedder()._vector(doc)) for doc in filler]
    assert min(sum(q * n for q, n in zip(query, note, strict=True)) for note in notes) > 0.85
    # Measured against the query's median cosine, not against 0.2, the paraphrase stands
    # out as clearly as with the plain model, and the unrelated notes earn nothing.
    for archive in (plain, offset):
        hits = archive.search("s1", "package dispatched", k=40)
        assert contents(hits)[0] == docs[-1]
        assert hits[0].score == pytest.approx(0.4)
        assert all(hit.score <= 0.2 for hit in hits[1:])


def test_dense_floor_is_the_median_cosine_of_enough_entries() -> None:
    many = [0.1 * i for i in range(20)]
    assert vectors.dense_floor(many, 0.2) == pytest.approx(0.95)
    assert vectors.dense_floor(many, 1.5) == 1.5  # never below min_similarity
    assert vectors.dense_floor(many[:5], 0.2) == 0.2  # too few to say what unrelated scores
    assert vectors.dense_floor([float("-inf")] * 40, 0.2) == 0.2  # other models' vectors


def test_unchanged_entries_are_not_embedded_again(make_archive: MakeArchive) -> None:
    embedder = ConceptEmbedder()
    archive = make_archive(embedder=embedder)
    batch = entries("first line", "second line")
    archive.index("s1", batch)
    archive.index("s1", batch)
    assert embedder.calls == [["first line", "second line"]]


def test_entries_without_text_are_kept_but_not_embedded(make_archive: MakeArchive) -> None:
    embedder = ConceptEmbedder()
    archive = make_archive(embedder=embedder)
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]}
    assert archive.index("s1", [Entry(image, 85, 1)]) == 1
    assert embedder.calls == []
    assert archive.search("s1", "image") == []


def test_a_user_wide_dense_search(make_archive: MakeArchive) -> None:
    archive = make_archive(embedder=ConceptEmbedder())
    archive.index("s1", entries("hello"), user_id="u1")
    archive.index("s2", entries("The parcel ships on Monday."), user_id="u1")
    archive.index("s3", entries("The parcel ships on Monday."), user_id="u2")
    hits = archive.search("s1", "package dispatched", user_id="u1")
    assert [hit.session_id for hit in hits] == ["s2"]


def test_an_embedder_of_the_wrong_size_is_rejected(make_archive: MakeArchive) -> None:
    class Liar(ConceptEmbedder):
        def embed(self, texts: list[str]) -> list[list[float]]:
            return [vector[:128] for vector in super().embed(texts)]

    archive = make_archive(embedder=Liar())
    with pytest.raises(ValueError, match="dim=256"):
        archive.index("s1", entries("text"))


def test_vectors_of_another_embedder_never_rank(tmp_path: Path) -> None:
    class Small(ConceptEmbedder):
        dim = 16

    path = str(tmp_path / "archive.db")
    with SQLiteArchive(path, embedder=Small()) as archive:
        archive.index("s1", entries("The parcel ships on Monday."))
    with SQLiteArchive(path, embedder=ConceptEmbedder()) as archive:
        hits = archive.search("s1", "package dispatched")
    assert hits == []


def test_pure_python_similarity_agrees_with_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numpy")
    archive = SQLiteArchive(embedder=ConceptEmbedder(), min_similarity=-1.0)
    archive.index("s1", entries(*STORY, *PARAPHRASE_DOCS))
    with_numpy = archive.search("s1", "package dispatched on monday", k=10)
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy now raises ImportError
    without = archive.search("s1", "package dispatched on monday", k=10)
    assert [h.entry.id for h in without] == [h.entry.id for h in with_numpy]
    assert [h.dense_rank for h in without] == [h.dense_rank for h in with_numpy]


def test_an_embedder_is_a_small_protocol() -> None:
    assert isinstance(ConceptEmbedder(), Embedder)


def test_reciprocal_rank_fusion() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], k=60)
    assert fused == {"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61}
    weighted = reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0, 0.5])
    assert weighted == {"a": 1 / 61, "b": 0.5 / 61}
    with pytest.raises(ValueError, match="1 weights for 2 rankings"):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])


# Backend specifics.


def test_sqlite_has_fts5_with_the_porter_tokenizer() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'porter unicode61')")


def test_a_sqlite_file_keeps_the_archive(tmp_path: Path) -> None:
    path = str(tmp_path / "archive.db")
    with SQLiteArchive(path) as archive:
        archive.index("s1", entries("the boiler was serviced in March"))
    with SQLiteArchive(path) as archive:
        assert contents(archive.search("s1", "boiler service")) == [
            "the boiler was serviced in March"
        ]


def test_a_sqlite_file_that_cannot_be_opened(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="cannot open"):
        SQLiteArchive(str(tmp_path / "missing-dir" / "archive.db"))


def test_sqlite_archive_is_safe_across_threads(tmp_path: Path) -> None:
    archive = SQLiteArchive(str(tmp_path / "archive.db"))
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                archive.index(f"s{n}", entries(f"thread {n} line {i} gadget", start=i + 1))
                archive.search(f"s{n}", "gadget")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(archive.search("s2", "gadget", k=50)) == 20
    archive.close()


def test_table_names_are_validated() -> None:
    with pytest.raises(ValueError, match="plain SQL name"):
        SQLiteArchive(table="x; DROP TABLE y")


def test_an_unreachable_postgres_is_store_unavailable() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreUnavailableError, match="PostgresArchive"):
        PostgresArchive("postgresql://nobody:secret@127.0.0.1:1/none", connect_timeout=2)


def test_the_postgres_password_is_not_in_errors() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreUnavailableError) as info:
        PostgresArchive("postgresql://nobody:secret@127.0.0.1:1/none", connect_timeout=2)
    assert "secret" not in str(info.value)


def test_postgres_tables_are_shared_by_archives(postgres_url: str) -> None:
    table = f"ctxwindow_archive_test_{uuid.uuid4().hex[:12]}"
    first = PostgresArchive(postgres_url, table=table)
    try:
        first.index("s1", entries("the lease ends in June"))
        with PostgresArchive(postgres_url, table=table) as second:
            assert contents(second.search("s1", "lease")) == ["the lease ends in June"]
    finally:
        first.drop()
        first.close()


def test_postgres_idf_is_that_of_the_searched_scope(postgres_archive: PostgresArchive) -> None:
    """Other sessions never change a session's ranking; the user's sessions do, in a user search."""
    archive = postgres_archive
    archive.index(
        "a", entries("zeppelin over the bay", "kettle on the stove", "kettle is boiling", "tea")
    )
    before = [(hit.entry.id, hit.score) for hit in archive.search("a", "kettle zeppelin")]
    archive.index("b", entries(*(f"zeppelin sighting {i}" for i in range(30))), user_id="u1")
    assert [(hit.entry.id, hit.score) for hit in archive.search("a", "kettle zeppelin")] == before
    assert contents(archive.search("a", "kettle zeppelin", k=1)) == ["zeppelin over the bay"]
    # In the user's scope zeppelin is in 31 rows of 34: the common word now.
    hits = archive.search("a", "kettle zeppelin", k=2, user_id="u1")
    assert contents(hits) == ["kettle on the stove", "kettle is boiling"]


# Rows of four words, each once, none a stop word: every row has the same
# length for FTS5 (tokens) and for PostgreSQL (distinct lexemes), and the words
# have no inflection that Porter and Snowball would treat differently.
SAME_LENGTH_ROWS = (
    "kettle garden river piano",
    "garden river piano window",
    "river piano window lantern",
    "piano window lantern harbor",
    "window lantern harbor meadow",
    "lantern harbor meadow violin",
    "harbor meadow violin garden",
    "meadow violin zeppelin window",
    "violin window piano orchard",
    "orchard window candle pepper",
)


@pytest.mark.parametrize(
    "query",
    [
        "kettle",
        "garden window",
        "zeppelin violin piano",
        "gardens garden",  # one lexeme twice: counted twice by both
        "lantern harbor meadow orchard pepper",
        "window",  # in more than half the rows: IDF floored at 1e-6 by both
    ],
)
def test_postgres_and_sqlite_score_alike(postgres_archive: PostgresArchive, query: str) -> None:
    """On rows of equal length, BM25 in SQL gives FTS5's ``bm25()`` scores and order."""
    with SQLiteArchive() as sqlite:
        for archive in (sqlite, postgres_archive):
            archive.index("s1", entries(*SAME_LENGTH_ROWS))
        expected = sqlite.search("s1", query, k=10)
        hits = postgres_archive.search("s1", query, k=10)
    assert [hit.entry.seq for hit in hits] == [hit.entry.seq for hit in expected]
    assert [hit.score for hit in hits] == pytest.approx([hit.score for hit in expected], rel=1e-9)


def test_an_existing_postgres_table_gets_the_seq_index(postgres_url: str) -> None:
    import psycopg

    table = f"ctxwindow_archive_test_{uuid.uuid4().hex[:12]}"
    archive = PostgresArchive(postgres_url, table=table)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP INDEX {table}_seq")  # as in a table made before at() existed
            PostgresArchive(postgres_url, table=table).close()
            found = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (f"{table}_seq",)
            ).fetchall()
        assert [row[0].split(" USING ")[1] for row in found] == ["btree (session_id, seq)"]
    finally:
        archive.drop()
        archive.close()
