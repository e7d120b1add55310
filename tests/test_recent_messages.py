"""The hybrid keeps the newest messages, compressed when they must be (issue 24, item 4).

``Keeping(recent_messages=N)`` (the hybrid's is 4) keeps the units holding the
newest N messages in the protected recent tail whatever their tokens, and
before any of them is evicted, each above the compression threshold is
compressed in place to half of it. BEAM's turns run to 1,000 tokens: at 2,048
tokens the tail of a quarter of the budget held one of them, and the three
before it were summarized away.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from ctxwindow import Context, Folding, Keeping, PriorityWindow, hybrid_policy
from ctxwindow.compress import Truncate
from ctxwindow.context.finishing import SQUEEZED
from ctxwindow.context.policy import LOW_WATER
from ctxwindow.policies.journal import NARROWED
from ctxwindow.tokens import chat_tokenizer

TOKENIZER = chat_tokenizer("gpt-4o")
WORDS = ["the parcel left Lyon", "订单已发货", "東京の倉庫", "🚚📦", "refund A-1042", "kettle"]

lengths = st.lists(st.integers(1, 400), min_size=4, max_size=30)


def text(i: int, words: int) -> str:
    return f"turn {i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))


@given(lengths=lengths, budget=st.sampled_from([1024, 2048, 4096]))
def test_the_newest_four_messages_stay_whole_or_compressed(lengths: list[int], budget: int) -> None:
    """After every turn the hybrid's window holds its newest four messages (a message
    above the threshold compressed to half of it, the newest too unless it is the user's
    turn, kept whole) whenever they fit so beside the rolling summary's room, in the room
    the window steps down to, at each turn since the oldest of them was added (a user
    turn too large for that evicts older ones, which do not come back)."""
    window = hybrid_policy()(budget, TOKENIZER)
    threshold = window.compress_threshold
    sizes: list[int] = []
    fitted: list[bool] = []
    for i, words in enumerate(lengths):
        entry = window.add("user" if i % 2 == 0 else "assistant", text(i, words))
        assert entry is not None
        sizes.append(entry.tokens)
        least = [s if s <= threshold else threshold // 2 for s in sizes[-4:]]
        newest = sizes[-1] if i % 2 == 0 else least[-1]  # the user's turn stays whole
        fitted.append(sum(least[:-1]) + newest + budget // 8 <= LOW_WATER * budget)
        if not all(fitted[-4:]):
            continue  # they could not all stay: the oldest went first (not checked here)
        held = {entry.seq for entry in window.entries()}
        newest = set(range(max(0, i - 3), i + 1))  # the seqs of the newest four
        assert newest <= held, (sizes[-4:], sorted(held)[-6:])


def test_a_recent_message_too_large_is_compressed_not_summarized() -> None:
    """Turns of about 700 tokens at a budget of 2,048: the newest four stay, the three
    older compressed (each above a quarter of the budget), the newest whole."""
    window = hybrid_policy()(2048, TOKENIZER)
    for i in range(12):
        window.add("user" if i % 2 == 0 else "assistant", text(i, 172))
    newest = [e for e in window.entries() if e.seq >= 8]
    assert [e.seq for e in newest] == [8, 9, 10, 11]
    assert ["compressed" in e.metadata for e in newest] == [True, True, True, False]
    assert all(e.tokens <= window.compress_threshold // 2 for e in newest[:3])


def test_a_long_newest_reply_is_compressed_to_keep_the_three_before_it() -> None:
    """BEAM's case at 2,048 tokens: a reply of ~1,500 tokens after turns of ~250 and ~100.
    The reply is compressed to half the threshold when it is added, and the three before
    it stay (the window evicted all three and kept the reply whole, until it let even the
    reply go when the summary grew); a user's turn that long is kept whole."""
    window = hybrid_policy()(2048, TOKENIZER)
    for i, words in enumerate([60, 60, 25, 380]):
        window.add("user" if i % 2 == 0 else "assistant", text(i, words))
    held = {e.seq: e for e in window.entries()}
    assert sorted(held) == [0, 1, 2, 3]
    assert "compressed" in held[3].metadata
    assert held[3].tokens <= window.compress_threshold // 2
    window.add("user", text(4, 380))
    held = {e.seq: e for e in window.entries()}
    assert 4 in held and "compressed" not in held[4].metadata


def test_a_reply_larger_than_the_budget_is_compressed_to_the_threshold() -> None:
    """A reply larger than the whole budget is compressed as a victim would be, to the
    threshold, and the turns before it stay; a user's turn that large is compressed to
    fit the room, as fully as it can be sent."""
    window = hybrid_policy()(1024, TOKENIZER)
    window.add("user", text(0, 40))
    reply = window.add("assistant", text(1, 600))
    assert reply is not None and reply.tokens <= window.compress_threshold
    assert [e.seq for e in window.entries()] == [0, 1]
    question = window.add("user", text(2, 600))
    assert question is not None and question.tokens > window.budget // 2


def test_a_threshold_above_the_budget_still_fits_a_reply_to_the_room() -> None:
    """With a compression threshold above the room (2,000 at a budget of 1,000), a reply
    larger than the budget is compressed to fit the room, not to the threshold (it came
    out at 1,405 tokens, over the budget)."""
    window = PriorityWindow(
        1000, tokenizer=TOKENIZER, oversize="drop",
        folding=Folding(compressor=Truncate(TOKENIZER), compress_threshold=2000),
    )  # fmt: skip
    reply = window.add("assistant", "The parcel left Lyon on Monday. 包裹已发货。 " * 150)
    assert reply is not None and reply.tokens <= 1000
    assert window.total_tokens <= window.budget


def test_without_recent_messages_the_tail_is_tokens_only() -> None:
    """The option is the hybrid's; a ``PriorityWindow`` without it keeps its recent tail
    by tokens alone (a quarter of the budget), as before: older large turns go."""
    window = PriorityWindow(2048, keeping=Keeping())
    for i in range(12):
        window.add("user" if i % 2 == 0 else "assistant", text(i, 172))
    assert len([e for e in window.entries() if e.seq >= 8]) < 4


def test_recent_messages_is_checked() -> None:
    try:
        Keeping(recent_messages=-1)
    except ValueError as exc:
        assert "recent_messages" in str(exc)
    else:
        raise AssertionError("a negative recent_messages was accepted")


def preview_states(share: float) -> tuple[list[str | None], list[int], int, int]:
    """The states and tokens, in a manager's preview at 2,048 tokens with recall, of the
    newest four of 16 turns of about 700 tokens each; the stored tokens of the newest, and
    how many entries were recalled."""
    from ctxwindow import ContextManager
    from ctxwindow.archive.sqlite import SQLiteArchive
    from ctxwindow.recall import RecallPolicy

    manager = ContextManager(
        "memory://", "gpt-4o", budget=2048, archive=SQLiteArchive(), reserve_output=0,
        prefetch=False, recall=RecallPolicy(recent_share=share),
    )  # fmt: skip
    ids = []
    for i in range(16):
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(manager.add("s", {"role": role, "content": text(i, 172)}).id)
    context = manager.preview("s", {"role": "user", "content": "What about refund A-1042?"})
    assert context.total_tokens <= 2048
    rows = {d.id: d for d in context.report.decisions if d.in_context}
    newest = [rows.get(i) for i in ids[-4:]]
    states = [None if row is None else row.state for row in newest]
    assert all(row is not None for row in newest)
    return (
        states,
        [row.tokens for row in newest if row],
        newest[-1].stored_tokens if newest[-1] else 0,
        context.report.recalled_entries,
    )


def test_the_manager_keeps_recent_turns_compressed_beside_what_it_recalls() -> None:
    """Through ``ContextManager`` with recall (the eval's and the service's path), the
    newest four messages before the question are all sent beside the recalled turns: the
    three the window compressed when it had to evict, and the newest, which it holds
    whole (700 tokens, over a quarter of the budget), compressed for this context alone,
    as far as what the query recalls needs."""
    states, tokens, stored, recalled = preview_states(0.5)
    assert states == ["compressed", "compressed", "compressed", "compressed"]
    assert recalled > 0
    assert stored > 600 > tokens[-1]  # as much as what it recalls needs, no more


@given(preview=st.booleans(), cache=st.booleans())
def test_nothing_is_compressed_for_a_query_that_recalls_nothing(preview: bool, cache: bool) -> None:
    """Four turns of ~300 tokens, over half of 2,048 together, and nothing else to recall
    (the window holds the whole session): they are sent whole, as the window holds them."""
    _, context = asked([75] * 4, 2048, cache=cache, preview=preview)
    states = [d.state for d in context.report.decisions if d.seq is not None]
    assert context.total_tokens > 2048 // 2 and set(states) == {"kept"}


def test_a_recent_share_that_holds_them_keeps_the_newest_whole() -> None:
    states, tokens, _, _ = preview_states(0.8)
    assert states == ["compressed", "compressed", "compressed", "kept"]
    assert tokens[-1] > 600


def test_a_recent_message_that_cannot_be_compressed_goes_in_its_turn() -> None:
    """An image of ~770 tokens among the newest messages at 2,048 (above the quarter, and
    nothing to compress): the other long ones are compressed, then the oldest goes; the
    image is not evicted ahead of it for failing to compress."""
    image = {"role": "user", "content": [
        {"type": "text", "text": "收据 📦"},
        {"type": "image_url", "image_url": {"url": "https://example.com/r.png", "detail": "high"}},
    ]}  # fmt: skip
    window = hybrid_policy()(2048, TOKENIZER)
    oldest = window.add("assistant", text(0, 150))
    kept = window.add(image)
    assert oldest is not None and kept is not None
    assert kept.tokens > window.compress_threshold
    window.add("assistant", text(2, 150))
    window.add("user", text(3, 150))
    held = {e.seq: e for e in window.entries()}
    assert kept.seq in held and oldest.seq not in held
    assert "compressed" in held[2].metadata and 3 in held


@given(
    lengths=st.lists(st.integers(1, 300), min_size=5, max_size=16),
    budget=st.sampled_from([1024, 2048]),
    cache=st.booleans(),
    preview=st.booleans(),
)
# the newest message alone over half the budget, compressed far below its share; the second
# fit (``refit``) fell to a water level under the least and sent it whole, over the budget
@example(lengths=[1] * 10 + [28, 98, 59, 130, 228], budget=1024, cache=False, preview=True)
# the step recall made folded two turns into the summary, which grew into recall's room
@example(lengths=[39, 225, 87, 167, 19, 127, 174, 49, 22], budget=2048, cache=True, preview=False)
def test_the_newest_four_are_in_every_context_with_recall(
    lengths: list[int], budget: int, cache: bool, preview: bool
) -> None:
    """Through the manager with recall, whatever the turns' lengths: of the newest four
    messages before the question, the build leaves none out that the window holds (whole,
    or compressed for this context, and then only beside something older that the query
    brought); a compressed one says so in the report and is no larger than the whole.
    (The window itself lets one go only when the newest messages take over half the
    budget.)"""
    ids, context = asked(lengths, budget, cache=cache, preview=preview)
    assert context.total_tokens <= budget
    every = {d.id: d for d in context.report.decisions}
    rows = {i: d for i, d in every.items() if d.in_context}
    held = [i for i in ids[-4:] if i in rows or every[i].reason == NARROWED]
    newest = [rows.get(i) for i in held]  # (the window may have had to let one go itself)
    assert all(row is not None for row in newest), [every[i].state for i in ids[-4:]]
    assert len(held) == 4 or sum(every[i].stored_tokens for i in ids[-5:]) > budget // 2
    squeezed = [row for row in newest if row and row.reason == SQUEEZED]
    others = [d for i, d in rows.items() if i not in ids[-4:] and d.seq is not None]
    assert not squeezed or any(d.state in ("recalled", "kept") for d in others)
    for row in newest:
        assert row is not None and row.tokens <= row.stored_tokens
        if row.tokens < row.stored_tokens:
            assert row.state == "compressed"


def asked(
    lengths: list[int], budget: int, *, cache: bool, preview: bool
) -> tuple[list[str], Context]:
    """A manager with recall, turns of ``lengths`` words, then a question about refund
    A-1042 previewed or added and built: the turns' ids, and the question's context."""
    from ctxwindow import ContextManager
    from ctxwindow.archive.sqlite import SQLiteArchive

    with ContextManager(
        "memory://", "gpt-4o", budget=budget, archive=SQLiteArchive(), reserve_output=0,
        prefetch=False, prompt_cache=cache,
    ) as manager:  # fmt: skip
        ids = []
        for i, words in enumerate(lengths):
            role = "user" if i % 2 == 0 else "assistant"
            ids.append(manager.add("s", {"role": role, "content": text(i, words)}).id)
        question = {"role": "user", "content": "What about refund A-1042 and 東京の倉庫?"}
        if preview:
            return ids, manager.preview("s", question)
        manager.add("s", question)
        return ids, manager.build("s")
