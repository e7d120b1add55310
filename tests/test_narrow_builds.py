"""A build narrower than its window leaves out whole steps, so its cut moves seldom.

A request with tools or a system prompt beside the window (the service, the
LangChain middleware) builds at a budget below the window's. Leaving out just
the excess moved the context's first message at every turn once the window
was full: each request missed the provider's prompt cache and the prompt grew
back (letta#3242's redundant compactions, seen through ctxwindow). With the
window's ``low_water``, the cut moves in whole steps (``in_steps``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxwindow import ContextManager, PriorityWindow, TokenWindow, Window, hybrid_policy
from ctxwindow.tokens import chat_tokenizer

WINDOWS: list[type[Window]] = [TokenWindow, PriorityWindow]
WORDS = ["order", "東京", "ship", "🚚", "parcel", "日本語", "depot", "refund"]


def turns(sizes: list[int]) -> list[dict[str, Any]]:
    messages = []
    for i, size in enumerate(sizes):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(size))
        messages.append({"role": role, "content": text})
    return messages


def cut_turns(contexts: list[list[dict[str, Any]]]) -> list[int]:
    """The turns whose context does not begin with the one before (a prompt-cache miss)."""
    return [
        i for i in range(1, len(contexts))
        if contexts[i][: len(contexts[i - 1])] != contexts[i - 1]
    ]  # fmt: skip


# A turn adds at most half a step (the window's step frees 30 % of the room at low_water 0.7,
# the hybrid's 15 %), so two cuts can never fall on consecutive turns.
sizes = st.lists(st.integers(5, 25), min_size=100, max_size=160)
small_sizes = st.lists(st.integers(5, 10), min_size=150, max_size=220)


def narrowed_cuts(window: Window, sizes: list[int], budget: int) -> list[int]:
    """The turns whose build at ``budget`` broke the prefix of the one before."""
    contexts = []
    for message in turns(sizes):
        window.add(message)
        context = window.build(max_tokens=budget)
        assert context.total_tokens <= budget
        contexts.append(context.messages)
    cuts = cut_turns(contexts)
    assert len(cuts) >= 2  # the window filled
    return cuts


@given(sizes=sizes, narrower=st.integers(50, 250))
def test_a_narrow_token_window_build_moves_its_cut_in_steps(
    sizes: list[int], narrower: int
) -> None:
    cuts = narrowed_cuts(TokenWindow(max_tokens=100_000, low_water=0.7), sizes, 700 - narrower)
    assert [i for i in cuts if i - 1 in cuts] == []  # a step frees more than one turn adds


@given(sizes=small_sizes, narrower=st.integers(50, 150))
def test_a_narrow_hybrid_build_moves_its_cut_in_steps(sizes: list[int], narrower: int) -> None:
    window = hybrid_policy()(100_000, chat_tokenizer("gpt-4o"))
    cuts = narrowed_cuts(window, sizes, 700 - narrower)
    assert [i for i in cuts if i - 1 in cuts] == []


@given(sizes=sizes, narrower=st.integers(20, 250))
def test_a_window_that_steps_itself_evicts_what_the_narrowed_builds_left_out(
    sizes: list[int], narrower: int
) -> None:
    """The window's own budget is reached too: its step evicts what the last narrowed
    build left out (if that is enough), so the requests' prefix still moves only at the
    builds' own steps, never on two turns running."""
    window = TokenWindow(max_tokens=700, low_water=0.7)
    cuts = narrowed_cuts(window, sizes, 700 - narrower)
    assert [i for i in cuts if i - 1 in cuts] == []


def test_a_manager_built_narrower_than_its_budget_steps_as_seldom_as_its_window() -> None:
    """letta#3242's shape through ``ContextManager``, built at 1,900 every turn."""
    manager = ContextManager("memory://", "gpt-4o", budget=100_000)
    contexts = []
    for i in range(120):
        manager.add(
            "s", {"role": "user", "content": f"And in city {i}? 东京呢？ " + "Details. " * (i % 6)}
        )
        context = manager.build("s", max_tokens=1900)
        assert context.total_tokens <= 1900
        contexts.append(context.messages)
        manager.add(
            "s", {"role": "assistant", "content": f"City {i} is fine. " + "Words. " * (i % 4)}
        )
    cuts = cut_turns(contexts)
    assert len(cuts) >= 5  # the window is full many times over
    assert [i for i in cuts if i - 1 in cuts] == []


@given(sizes=sizes, narrower=st.integers(20, 400))
def test_a_build_not_sent_changes_nothing(sizes: list[int], narrower: int) -> None:
    """A narrowed build that is not sent (``sent=False``: a preview, a count, a check)
    leaves no hint: the window then evicts, and builds, as one that was never built."""
    probed = TokenWindow(max_tokens=700, low_water=0.7)
    untouched = TokenWindow(max_tokens=700, low_water=0.7)
    for message in turns(sizes):
        probed.add(message)
        untouched.add(message)
        probed.build(max_tokens=700 - narrower, sent=False)
        assert probed.messages() == untouched.messages()


def test_previews_and_counts_leave_a_session_as_it_was() -> None:
    """The eval asks its questions by ``preview`` and the service counts tokens by a build
    not sent: neither may move the session's next eviction (they did, through the
    narrowed build's hint, found by the eval's shared-versus-scratch test)."""
    probed = ContextManager("memory://", "gpt-4o", budget=900)
    plain = ContextManager("memory://", "gpt-4o", budget=900)
    for i in range(90):
        asked_about = f"And in city {i}? 东京呢？ " + "Details. " * (i % 6)
        question = {"role": "user", "content": asked_about}
        answer = {"role": "assistant", "content": f"City {i} is fine. 🚚 " + "Words. " * (i % 4)}
        for manager in (probed, plain):
            manager.add("s", question)
            manager.add("s", answer)
        asked = {"role": "user", "content": f"What about city {i - 40}?"}
        assert probed.preview("s", asked).messages == plain.preview("s", asked).messages, i
        probed.build("s", max_tokens=300 + 7 * (i % 50), sent=False)


@given(sizes=sizes, room=st.integers(1, 400), window_type=st.sampled_from(WINDOWS))
def test_room_for_recalled_turns_is_taken_exactly(
    sizes: list[int], room: int, window_type: type[Window]
) -> None:
    """A build whose budget is its ``grid`` less the room recalled turns take (the
    manager's) leaves out whole steps only for the grid, and just what the room needs
    beyond: no room a step would waste (it cost the eval 2-3 points of evidence recall at
    4,096-8,192 when the recalled turns' room was rounded up to steps too)."""
    window = window_type(700, "gpt-4o", low_water=0.7)
    for message in turns(sizes):
        window.add(message)
    context = window.build(max_tokens=700 - room, grid=700)
    assert context.total_tokens <= 700 - room
    left = [m for m in window.messages() if m not in context.messages]
    if left:  # the last one left out (in the order of eviction) would not have fitted
        back = max(map(window.tokenizer.message_tokens, left))
        assert context.total_tokens + back > 700 - room


def test_a_preview_with_recall_leaves_no_step_of_room_unused() -> None:
    """The eval's question, through the manager in the cache mode: recalled turns take
    their room, the window's newest turns the rest, down to less than one turn of it (a
    step of the window's was left unused before ``grid``)."""
    from ctxwindow.archive.sqlite import SQLiteArchive

    manager = ContextManager(
        "memory://", "gpt-4o", budget=1500, archive=SQLiteArchive(), reserve_output=0,
        prefetch=False,
    )  # fmt: skip
    sizes = []
    for i in range(80):
        city = ["Lyon", "東京", "Kyoto", "Porto"][i % 4]
        text = f"Turn {i}: the parcel {i} went to {city}. " + "Words. " * (i % 9)
        manager.add("s", {"role": "user" if i % 2 == 0 else "assistant", "content": text})
        sizes.append(manager.history("s")[-1].tokens)
    for city in ["Lyon", "東京", "Kyoto"]:
        context = manager.preview("s", {"role": "user", "content": f"Which parcel went to {city}?"})
        assert context.report.recalled_entries > 0
        assert 1500 - max(sizes) < context.total_tokens <= 1500
