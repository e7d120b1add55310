"""A larger budget never keeps less: the per-build version of "monotone in budget".

``TokenWindow`` and ``PriorityWindow`` (its defaults) keep, under a larger
budget, every message a smaller budget kept. The hybrid does not, build by
build: its protected recent tail is a share of the budget, and a compressed
unit's size depends on the budget, so its victims can differ (a counterexample
is pinned below; docs/priority.md says so). With recall on it cannot hold
either (a larger room can take a larger candidate in place of two smaller
ones). For the hybrid the eval checks it in aggregate (docs/eval.md).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import ContextManager, PriorityWindow, TokenWindow
from ctxwindow.context import hybrid_policy
from ctxwindow.stores.memory import MemoryStore

words = st.sampled_from(
    [
        "parcel", "A-1042", "refund", "Lyon", "nurse", "订单", "已发货", "包裹", "東京",
        "ありがとう", "🚚", "📦", "the", "tracking", "SF1234567890", "Monday", "kettle",
    ]
)  # fmt: skip
turns = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant"]),
        st.lists(words, min_size=1, max_size=120).map(" ".join),
    ),
    min_size=1,
    max_size=40,
)
Turns = list[tuple[str, str]]
WINDOWS = [TokenWindow, PriorityWindow]


def kept(
    window: type[TokenWindow] | type[PriorityWindow], messages: Turns, budget: int
) -> set[int]:
    w = window(budget, "gpt-4o")
    for role, text in messages:
        w.add(role, text)
    return {entry.seq for entry in w.entries()}


@settings(deadline=None)
@given(turns, st.integers(120, 3000), st.integers(1, 3000), st.sampled_from(WINDOWS))
def test_a_larger_budget_keeps_everything_a_smaller_one_kept(
    messages: Turns, budget: int, more: int, window: type[TokenWindow] | type[PriorityWindow]
) -> None:
    assert kept(window, messages, budget) <= kept(window, messages, budget + more)


# The hybrid does not keep this property build by build, and says so (docs/priority.md): its
# protected recent tail is a share of the budget and a compressed unit's size depends on the
# budget, so the victim order can differ by one token of budget. Hypothesis found this one.
COUNTEREXAMPLE = [("user", "parcel")] * 12 + [
    ("user", "parcel parcel parcel"),
    ("user", "parcel parcel parcel parcel parcel parcel"),
    ("user", "kettle"),
    ("user", "parcel parcel parcel parcel"),
    ("user", "Lyon " + "parcel " * 9 + "A-1042 订单 已发货 已发货"),
    ("user", "parcel"),
]


def present(messages: Turns, budget: int) -> set[int]:
    """The seqs of the stored messages in the hybrid's context (whole or compressed)."""
    policy = hybrid_policy(summary=False, cache=False)
    manager = ContextManager(
        MemoryStore(), "gpt-4o", policy=policy, budget=budget, reserve_output=0, prefetch=False
    )
    for role, text in messages:
        manager.add("s", {"role": role, "content": text})
    report = manager.build("s").report
    manager.close()
    return {d.seq for d in report.decisions if d.in_context and d.seq is not None and d.seq > 0}


def test_the_hybrid_is_not_monotone_build_by_build() -> None:
    """The documented limit, pinned: one more token of budget, and the hybrid's recent tail
    (a quarter of the budget) changes which of two older short turns goes: at 120 tokens
    the context holds the 14th turn and not the 13th, at 121 the 13th and not the 14th.
    When this changes, the docs' limit and this test go."""
    assert present(COUNTEREXAMPLE, 120) - present(COUNTEREXAMPLE, 121) == {14}
