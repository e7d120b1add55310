"""Recall: neighbour scores, the per-query budget split, and what the window keeps."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ctxwindow import ContextManager, Entry, PriorityWindow, TokenWindow, count_tokens
from ctxwindow import recall as recall_module
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.context import recalling
from ctxwindow.context.recalling import READ_AHEAD, Recalling, trimmed
from ctxwindow.context.session import CACHED_UNITS, Session
from ctxwindow.messages import Unit, with_kind
from ctxwindow.policies import Keeping
from ctxwindow.recall import RecallPolicy, water_level
from ctxwindow.stores.memory import MemoryStore


def unit(seq: int, text: str = "x", tokens: int = 10, role: str = "user") -> Unit:
    entry = Entry({"role": role, "content": text}, tokens, seq, id=f"e{seq}")
    return Unit([entry], tokens)


def test_with_kind_copies_every_field_as_replace_does() -> None:
    """``with_kind`` names every field of ``Entry`` by position: one added and not passed on
    would come back at its default, not the entry's, and fail here."""
    defaults = Entry({"role": "user", "content": "d"}, 1, 1)
    values: dict[str, Any] = {
        "message": {"role": "assistant", "content": "回答 🎉", "name": "n"},
        "tokens": 7,
        "seq": 42,
        "id": "e-42",
        "pinned": True,
        "priority": 3,
        "kind": "summary",
        "created_at": 1234.5,
        "metadata": {"compressed": {"from_tokens": 9}},
    }
    assert set(values) == {f.name for f in dataclasses.fields(Entry)}
    entry = Entry(**values)
    assert all(getattr(entry, name) != getattr(defaults, name) for name in values)
    copy = with_kind(entry, "recalled")
    assert copy == dataclasses.replace(entry, kind="recalled") and copy is not entry
    assert copy.kind == "recalled" and entry.kind == "summary"


def test_a_hit_shares_its_score_with_its_neighbours() -> None:
    policy = RecallPolicy(spread=(0.5, 0.25))
    assert policy.scores({5: 8.0}) == {3: 2.0, 4: 4.0, 5: 8.0, 6: 4.0, 7: 2.0}
    # two hits next to each other lift each other; seq 0 has no left neighbour
    assert policy.scores({0: 2.0, 1: 2.0}) == {0: 3.0, 1: 3.0, 2: 1.5, 3: 0.5}


def spread_by_hand(spread: tuple[float, ...], hits: dict[int, float]) -> dict[int, float]:
    """The scores as the docstring says them: each hit in turn adds its score to itself,
    then its shares to the turns 1, 2, 3... places before and after it."""
    out: dict[int, float] = {}
    for seq, score in hits.items():
        out[seq] = out.get(seq, 0.0) + score
        for distance, share in enumerate(spread, 1):
            for near in (seq - distance, seq + distance):
                if near >= 0:
                    out[near] = out.get(near, 0.0) + share * score
    return dict(sorted(out.items()))


@settings(max_examples=300, deadline=None)
@given(
    spread=st.lists(st.floats(0, 1), max_size=4).map(tuple),
    hits=st.dictionaries(  # hits close together: a turn gets shares of several, in order
        st.integers(0, 40) | st.integers(0, 3_000),
        st.floats(0, 1e6, allow_subnormal=False),
        max_size=120,
    ),
)
def test_the_spread_on_arrays_adds_the_same_floats_as_the_loop(
    spread: tuple[float, ...], hits: dict[int, float]
) -> None:
    """With numpy the neighbour scores are summed on arrays: the same additions in the same
    order, so the same floats to the last bit (a tie broken by seq stays the same tie), and
    in seq order, as without numpy."""
    policy = RecallPolicy(spread=spread)
    expected = list(spread_by_hand(spread, hits).items())
    assert list(policy.scores(hits).items()) == expected
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recall_module, "numpy_or_none", lambda: None)
        assert list(policy.scores(hits).items()) == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"depth": 0},
        {"tokens_per_hit": 0},
        {"min_share": 1.5},
        {"recent_messages": -1},
        {"recent_share": 1.5},
        {"spread": (2.0,)},
        {"max_depth": 10},  # below depth
    ],
)
def test_a_policy_out_of_range_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RecallPolicy(**bad)


def test_units_rank_by_their_best_entry_and_ties_go_to_the_older() -> None:
    call = Entry({"role": "assistant", "content": "c"}, 5, 4, id="e4")
    result = Entry({"role": "tool", "content": "r", "tool_call_id": "t"}, 5, 5, id="e5")
    pair = Unit([call, result], 10)  # scores as its result, the better entry
    scores = {1: 1.0, 2: 3.0, 3: 3.0, 4: 0.5, 5: 2.0}
    ranked = RecallPolicy().rank(scores, [unit(1), unit(3), pair, unit(2), unit(9)])
    assert [(score, u.seq) for score, u in ranked] == [
        (3.0, 2),
        (3.0, 3),
        (2.0, 4),
        (1.0, 1),
        (0.0, 9),
    ]


def test_choose_stops_below_the_share_of_the_best() -> None:
    ranked = [(10.0, unit(1)), (5.0, unit(2)), (1.9, unit(3))]
    recall = RecallPolicy(min_share=0.2).choose(ranked, kept=(), room=1000)
    assert [u.seq for u in recall.units] == [1, 2]  # 1.9 < 0.2 * 10
    assert all(e.kind == "recalled" for u in recall.units for e in u.entries)
    assert recall.tokens == 20


def test_choose_keeps_the_room_and_passes_over_what_does_not_fit() -> None:
    ranked = [(9.0, unit(1, tokens=30)), (8.0, unit(2, tokens=50)), (7.0, unit(3, tokens=15))]
    recall = RecallPolicy(min_share=0.0).choose(ranked, kept=(), room=50)
    assert [u.seq for u in recall.units] == [1, 3]
    assert recall.tokens <= 50


def test_choose_without_copies_weighs_the_same_units_themselves() -> None:
    """``copies=False`` chooses what ``choose`` does, handing back the ranked units
    themselves instead of copies of kind ``"recalled"``."""
    ranked = [(1.0 - i / 10, unit(i, tokens=10 + 7 * i)) for i in range(1, 9)]
    kept = {"e2"}
    copied = RecallPolicy().choose(ranked, kept, 60)
    weighed = RecallPolicy().choose(ranked, kept, 60, copies=False)
    assert [u.seq for u in weighed.units] == [u.seq for u in copied.units]
    assert (weighed.keep, weighed.tokens) == (copied.keep, copied.tokens)
    originals = {id(u) for _, u in ranked}
    assert all(id(u) in originals for u in weighed.units)
    assert not any(id(u) in originals for u in copied.units)
    assert {e.kind for u in copied.units for e in u.entries} == {"recalled"}


def test_what_the_window_holds_is_kept_there_not_recalled() -> None:
    ranked = [(9.0, unit(1)), (8.0, unit(2)), (7.0, unit(3))]
    recall = RecallPolicy(min_share=0.0).choose(ranked, kept={"e2"}, room=25)
    assert [u.seq for u in recall.units] == [1]
    assert recall.keep == {"e2"}  # it took room: unit 3 no longer fits


def test_a_tool_result_alone_is_never_recalled() -> None:
    ranked = [(9.0, unit(1, role="tool"))]
    assert RecallPolicy().choose(ranked, kept=(), room=100).units == []


def test_the_room_leaves_the_pinned_part_and_the_newest_messages() -> None:
    assert RecallPolicy().room(1000, pinned=100, recent=50) == 850
    assert RecallPolicy().room(100, pinned=200) == 0


def test_a_query_asks_for_enough_hits_to_fill_its_room() -> None:
    policy = RecallPolicy(depth=50, tokens_per_hit=20)
    assert policy.depth_for(512) == 50  # never fewer than depth
    assert policy.depth_for(4096) == 204
    assert policy.depth_for(96_000) == policy.max_depth == 256  # bounded, whatever the room
    assert RecallPolicy(max_depth=1000).depth_for(8192) == 409


class ReadCounting(SQLiteArchive):
    """Counts the archived entries a search's caller reads (``at``) or a search decodes."""

    def __init__(self) -> None:
        super().__init__()
        self.read = 0

    def _at(self, session_id: str, seqs: list[int]) -> list[str]:
        found = super()._at(session_id, seqs)
        self.read += len(found)
        return found

    def _load(self, keys: Any) -> dict[int, tuple[str, str]]:
        found = super()._load(keys)
        self.read += len(found)
        return found


def test_what_one_query_reads_fits_the_sessions_cache() -> None:
    """Its hits and their neighbours, ``max_depth`` x (1 + 2 x the spread), fit
    ``CACHED_UNITS``: caching them never drops a turn the same query cached or used."""
    policy = RecallPolicy()
    assert policy.max_depth * (1 + 2 * len(policy.spread)) <= CACHED_UNITS


def test_a_query_reads_only_the_turns_no_query_before_it_read() -> None:
    """A large room asks for the most hits (``max_depth``); what one query reads fits the
    session's cache, so the next query that finds the same turns reads none again. The
    manager that added the turns has them cached already (up to ``CACHED_UNITS``) and reads
    none; one that loads the session (another process) reads what its window lacks."""
    archive, store = ReadCounting(), MemoryStore()
    cm = ContextManager(store, budget=16_000, archive=archive, prefetch=False)
    for i in range(1000):
        said = "a parcel left the depot" if i % 4 == 0 else f"invoice {i} is paid"
        cm.add("s", {"role": "user", "content": f"order {i}: {said}"})
        cm.add("s", {"role": "assistant", "content": f"noted, order {i}"})
    cm.drain()
    assert cm.build("s", query="where is the parcel from the depot").report.recalled_entries
    assert archive.read == 0  # every turn it added is cached as it came
    loaded = ContextManager(store, budget=16_000, archive=archive, prefetch=False)
    loaded.build("s", query="where is the parcel from the depot")
    first = archive.read
    assert first >= RecallPolicy().max_depth  # a deep query: every hit and its neighbours
    loaded.build("s", query="which parcel left the depot")
    assert archive.read == first  # the same turns found: all cached, none read again


def read_lazily(
    policy: RecallPolicy,
    own: dict[int, float],
    sizes: dict[int, int],
    cached: set[int],
    budget: int,
) -> tuple[list[tuple[float, Unit]], list[int]]:
    """``Recalling.reading`` driven as an archiver drives it, over single-message units of
    ``sizes`` tokens (``cached``: those the session has): what it ranks, and the seqs read."""
    recalling = Recalling()
    recalling.recall = policy
    session = Session("s", TokenWindow(100, "gpt-4o"))
    for seq in sorted(cached):
        session.units[seq] = unit(seq, tokens=sizes[seq])
    reading, read = recalling.reading(session, own, budget), []
    try:
        while True:
            seqs = next(reading)
            assert seqs and not set(seqs) & (set(read) | set(session.units))
            read += seqs
            for seq in seqs:
                if seq in sizes:  # a seq past the session's end is not archived
                    recalling.cache(session, unit(seq, tokens=sizes[seq]))
    except StopIteration as done:
        return done.value, read


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 600), min_size=1, max_size=120),
    st.dictionaries(st.integers(1, 120), st.floats(0.01, 20.0), min_size=1, max_size=40),
    st.sets(st.integers(1, 120), max_size=60),
    st.integers(1, 3000),
)
def test_recall_reads_best_first_and_leaves_out_only_what_enough_outranks(
    sizes: list[int], hits: dict[int, float], cached: set[int], budget: int
) -> None:
    """Reading stops early, never at a cost: a candidate left unread is outranked (worth at
    least as much) by units read that hold ``READ_AHEAD`` times the budget, more than any
    room recall is given; what is read is ranked as reading everything would rank it."""
    policy = RecallPolicy()
    size_of = {seq: size for seq, size in enumerate(sizes, 1)}
    own = {seq: score for seq, score in hits.items() if seq in size_of}
    assume(own)
    cached &= set(size_of)
    ranked, read = read_lazily(policy, own, size_of, cached, budget)
    scores, floor = policy.scores(own), policy.floor(own)
    candidates = [seq for seq, score in scores.items() if score >= floor and seq in size_of]
    every = policy.rank(scores, [unit(seq, tokens=size_of[seq]) for seq in candidates])
    assert set(read) <= set(scores) - cached
    got = [u.seq for _, u in ranked]
    assert got == [u.seq for _, u in every if u.seq in set(got)]  # the same order
    for worth, left in every:
        if left.seq not in got:
            outranking = sum(u.size for w, u in ranked if w >= worth)
            assert outranking >= READ_AHEAD * budget
    for room in (budget // 3, budget):
        lazy, full = policy.choose(ranked, (), room), policy.choose(every, (), room)
        if sum(u.size for _, u in every) <= READ_AHEAD * budget:  # read whole
            assert [u.seq for u in lazy.units] == [u.seq for u in full.units]


def test_a_long_session_reads_a_few_budgets_of_candidates_not_every_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query matching most of a long session reads what could come back, best first, and
    stops at a few times the budget: it sends what reading every hit and neighbour sends."""
    policy = RecallPolicy(depth=100)

    def built(read_ahead: int) -> tuple[list[Any], int]:
        monkeypatch.setattr(recalling, "READ_AHEAD", read_ahead)
        archive, store = ReadCounting(), MemoryStore()
        cm = ContextManager(store, budget=600, archive=archive, prefetch=False, recall=policy)
        for i in range(1200):
            cm.add("s", {"role": "user", "content": f"order {i}: a parcel left depot {i % 7}"})
            cm.add("s", {"role": "assistant", "content": f"noted, order {i} is on its way"})
        cm.drain()
        # loaded by another manager, which has not cached what the first one added
        loaded = ContextManager(store, budget=600, archive=archive, prefetch=False, recall=policy)
        context = loaded.build("s", query="which parcel left depot 3")
        assert context.report.recalled_entries > 0
        return context.messages, archive.read

    lazy, lazily_read = built(recalling.READ_AHEAD)
    every, all_read = built(10**9)
    assert lazy == every
    assert all_read >= policy.depth * 5  # every hit and most neighbours
    assert lazily_read * 2 <= all_read


def test_the_floor_is_a_share_of_the_best_hit_not_of_a_lifted_neighbour() -> None:
    policy = RecallPolicy(spread=(0.5,), min_share=0.5)
    hits = {10: 4.0, 11: 4.0, 20: 2.0}
    assert policy.scores(hits)[10] == 6.0  # lifted by its neighbour
    assert policy.floor(hits) == 2.0  # half of 4.0, so the hit at 20 still counts


# -- the split, decided per query ------------------------------------------------------


def conversation(cm: ContextManager) -> None:
    cm.add("s", {"role": "system", "content": "Be brief."})
    cm.add("s", {"role": "user", "content": "My tracking id is SF1234567890 for the kettle."})
    cm.add("s", {"role": "assistant", "content": "Noted, the kettle ships Monday."})
    cm.add("s", {"role": "user", "content": "我的会员号是 VIP-8848，住在东京。"})
    for i in range(80):
        cm.add("s", {"role": "user", "content": f"small talk number {i} about the weather"})
        cm.add("s", {"role": "assistant", "content": f"indeed, weather remark {i}"})


def recalled(context: Any) -> list[str]:
    return [d.preview for d in context.report.decisions if d.state == "recalled"]


def test_a_strong_match_gets_more_than_a_fixed_quarter_of_the_budget() -> None:
    cm = ContextManager(MemoryStore(), budget=600, archive=SQLiteArchive())
    conversation(cm)
    context = cm.build("s", query="tracking id kettle ships")
    assert context.report.tokens_by_category["recalled"] > 0
    assert any("SF1234567890" in text for text in recalled(context))
    assert any("ships Monday" in text for text in recalled(context))  # its neighbour
    assert context.total_tokens <= 600


def test_a_query_that_matches_nothing_leaves_the_window_as_it_is() -> None:
    cm = ContextManager(MemoryStore(), budget=600, archive=SQLiteArchive())
    conversation(cm)
    plain = ContextManager(MemoryStore(), budget=600)
    conversation(plain)
    context = cm.build("s", query="zeppelin harmonica")
    assert recalled(context) == []
    assert context.messages == plain.build("s").messages


def test_a_query_about_recent_turns_keeps_them_rather_than_recall_weaker_ones() -> None:
    cm = ContextManager(MemoryStore(), budget=600, archive=SQLiteArchive())
    conversation(cm)
    context = cm.build("s", query="weather remark 79")
    texts = [m["content"] for m in context.messages]
    assert "indeed, weather remark 79" in texts
    assert context.total_tokens <= 600


def test_recall_with_a_message_window_policy_counts_tokens() -> None:
    def policy(budget: int, tokenizer: Any) -> TokenWindow:
        return TokenWindow(budget, tokenizer.model, tokenizer=tokenizer)

    cm = ContextManager(MemoryStore(), budget=300, archive=SQLiteArchive(), policy=policy)
    conversation(cm)
    context = cm.build("s", query="会员号 东京")
    assert any("VIP-8848" in text for text in recalled(context))
    assert context.total_tokens == count_tokens(context.messages) <= 300


# -- windows keep what recall marks ------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(["a b c", "东京 会员", "😀 ok", "longer text " * 5]), min_size=2),
    st.integers(40, 200),
    st.data(),
)
def test_windows_leave_the_kept_units_out_last(texts: list[str], room: int, data: Any) -> None:
    for window in (TokenWindow(400), PriorityWindow(400, keeping=Keeping(reserve_recent=0))):
        for i, text in enumerate(texts):
            window.add("user" if i % 2 == 0 else "assistant", f"{text} {i}")
        entries = window.entries()
        keep = data.draw(st.sets(st.sampled_from([e.id for e in entries]), max_size=3))
        plain, kept = window.build(max_tokens=room), window.build(max_tokens=room, keep=keep)
        assert kept.total_tokens == count_tokens(kept.messages) <= room
        ids = {id(e.message): e.id for e in entries}
        in_plain = {ids[id(m)] for m in plain.messages}
        in_kept = {ids[id(m)] for m in kept.messages}
        assert len(in_kept & keep) >= len(in_plain & keep)
        wanted = [e.message for e in entries if e.id in keep]
        if count_tokens(wanted) <= room:
            assert keep <= in_kept  # what is kept goes last: it stays when it fits


def test_the_newest_messages_kept_share_half_of_the_budget() -> None:
    """Long turns: the newest four messages every context keeps take at most half of the
    budget together, compressed for the context when they must be, and leave the rest to
    what recall finds."""
    manager = ContextManager(
        MemoryStore(), "gpt-4o", archive=SQLiteArchive(), budget=2000, reserve_output=0,
        prefetch=False, prompt_cache=False,
    )  # fmt: skip
    for i in range(20):  # more than the budget holds, all about the question
        text = f"Shipment {i}: ceramic tiles to Bergen, pallet count {i + 3}. " * 12
        manager.add("s", {"role": "user", "content": text})
    for i in range(6):  # about 300 tokens each, nothing to do with the question
        manager.add("s", {"role": "assistant", "content": f"Weather note {i}. " + "Grey. " * 140})
    context = manager.preview("s", {"role": "user", "content": "Which tiles went to Bergen?"})
    weather = [m for m in context.messages if "Grey." in str(m["content"])]
    # the newest four, compressed for the context to fit half of it (recall has the rest)
    assert [str(m["content"])[:14] for m in weather] == [f"Weather note {i}" for i in (2, 3, 4, 5)]
    assert count_tokens(weather) <= 1000
    states = {d.id: d.state for d in context.report.decisions if d.in_context}
    assert list(states.values()).count("recalled") >= 3  # shipments: what the question asks
    manager.close()


def test_a_long_unit_needs_a_stronger_match_than_a_short_one() -> None:
    policy = RecallPolicy(short=100)
    short, long = unit(1, tokens=50), unit(2, tokens=400)
    ranked = policy.rank({1: 0.6, 2: 1.0}, [long, short])
    assert [(round(worth, 2), u.seq) for worth, u in ranked] == [(0.6, 1), (0.5, 2)]


@given(st.lists(st.integers(0, 2000), max_size=8), st.integers(-50, 5000))
def test_water_level_is_the_largest_cut_that_fits(sizes: list[int], room: int) -> None:
    """``water_level``: every size cut to the level fits the room together, and one token
    more would not (unless nothing is cut: then the level is the largest size)."""
    level = water_level(sizes, room)
    cut = sum(min(size, level) for size in sizes)
    if sum(sizes) <= room:
        assert level == max(sizes, default=0)
    elif room < 0:
        assert level == 0
    else:
        assert cut <= room < sum(min(size, level + 1) for size in sizes)


@given(
    sizes=st.lists(st.integers(1, 60), max_size=12),
    scored=st.sets(st.integers(0, 11)),
    excess=st.integers(1, 400),
)
def test_trimmed_gives_up_the_unscored_units_placed_last(
    sizes: list[int], scored: set[int], excess: int
) -> None:
    """With the prompt cache, recalled turns that no longer fit leave from the end: the
    units the query does not score, placed last first, as few as free ``excess`` tokens;
    none when those are not enough (the caller steps instead)."""
    sticky = [unit(i, f"turn {i}", size) for i, size in enumerate(sizes)]
    ids = frozenset(sticky[i].entries[0].id for i in scored if i < len(sticky))
    out = trimmed(sticky, ids, excess)
    gone = [u for u in sticky if u not in out]
    assert all(u.entries[0].id not in ids for u in gone)
    assert [u for u in sticky if u in out] == out  # the order is kept
    unscored = [u for u in sticky if u.entries[0].id not in ids]
    if sum(u.size for u in unscored) < excess:
        assert out == sticky
    else:
        assert sum(u.size for u in gone) >= excess
        assert gone == unscored[len(unscored) - len(gone) :]  # the last placed
        assert sum(u.size for u in gone[1:]) < excess  # and no more than needed
