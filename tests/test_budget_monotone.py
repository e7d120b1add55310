"""A larger budget never keeps less: the per-build version of "monotone in budget".

With recall off (no archive) and the prompt cache off (the window slides
message by message), the same conversation under a larger budget keeps every
message a smaller budget kept, whole or compressed. With recall on this cannot
hold build by build (a larger room can take a larger candidate in place of two
smaller ones); there the eval checks it in aggregate (docs/eval.md).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import ContextManager
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


def present(messages: list[tuple[str, str]], budget: int, summary: bool) -> set[int]:
    """The seqs of the stored messages in the context a budget gives (whole or compressed)."""
    policy = hybrid_policy(summary=summary, cache=False)
    manager = ContextManager(
        MemoryStore(), "gpt-4o", policy=policy, budget=budget, reserve_output=0, prefetch=False
    )
    for role, text in messages:
        manager.add("s", {"role": role, "content": text})
    report = manager.build("s").report
    manager.close()
    return {d.seq for d in report.decisions if d.in_context and d.seq is not None and d.seq > 0}


@settings(max_examples=60, deadline=None)
@given(turns, st.integers(120, 3000), st.integers(1, 3000), st.booleans())
def test_a_larger_budget_keeps_everything_a_smaller_one_kept(
    messages: list[tuple[str, str]], budget: int, more: int, summary: bool
) -> None:
    small = present(messages, budget, summary)
    large = present(messages, budget + more, summary)
    assert small <= large
