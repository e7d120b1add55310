"""What the window tests share: Hypothesis strategies of texts and tool units, a hybrid
window made for a budget, and checks of what a window stores and what its report says."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from ctxwindow.policies import Folding, PriorityWindow, Report, Window
from ctxwindow.policies.explain import IN_CONTEXT, STATES

PHRASES = [
    "hello",
    "The order A-1042 shipped.",
    "你好，世界",
    "请记住我的生日是五月三日。",
    "日本語のテキストです。",
    "カタカナ",
    "🎉🚀",
    "👩‍👩‍👧‍👦",
    "mixed 中文 and English 😀",
    "",
]


texts = st.one_of(
    st.sampled_from(PHRASES),
    st.lists(st.sampled_from(PHRASES), min_size=1, max_size=30).map(" ".join),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
)


def tool_unit(n: int, results: list[str], tag: int) -> list[dict[str, Any]]:
    ids = [f"call_{tag}_{i}" for i in range(n)]
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    unit: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": calls}]
    unit += [
        {"role": "tool", "tool_call_id": i, "content": r}
        for i, r in zip(ids, results[:n], strict=True)
    ]
    return unit


def check_one_storage(window: Window) -> None:
    """units() and messages() read one storage: the very same messages, in the same order."""
    messages = window.messages()
    body = messages[1:] if window.system is not None else messages
    from_units = [message for unit in window.units() for message in unit.messages()]
    assert len(from_units) == len(body) == len(window)
    assert all(a is b for a, b in zip(from_units, body, strict=True))


def hybrid_window(budget: int) -> PriorityWindow:
    from ctxwindow.compress import Chain, Extractive, RollingSummary, Structured, Truncate
    from ctxwindow.tokens import chat_tokenizer

    tok = chat_tokenizer("gpt-4o")
    return PriorityWindow(
        budget,
        system="sys",
        oversize="drop",
        folding=Folding(
            compressor=Chain(Structured(tok), Extractive(tok), Truncate(tok)),
            compress_threshold=max(budget // 4, 20),
            summarizer=RollingSummary(Extractive(tok), tok).fold,
            summary_tokens=max(budget // 8, 20),
            fold_tokens=30,
        ),
    )


long_texts = st.lists(st.sampled_from(["订单 A-1042 已发货。", "The code is K7.", "日本語の文。"]),
                      min_size=5, max_size=80).map(" ".join)  # fmt: skip


def check_totals(report: Report, total_tokens: int) -> None:
    """The report's totals are the sums of its rows."""
    rows = list(report.decisions)
    inside = [d for d in rows if d.in_context]
    assert all(d.state in STATES for d in rows)
    assert len({d.id for d in rows}) == len(rows), "a message has one row"
    seqs = [d.seq for d in rows if d.seq is not None and d.category != "system"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "rows in seq order, once each"
    heads = [d.category for d in rows if d.category in ("system", "summary")]
    assert heads == sorted(heads, key=lambda c: c != "system") and rows[: len(heads)] == [
        d for d in rows if d.category in ("system", "summary")
    ], "the system prompt, then the summary, first: as the context sends them"
    in_tokens = sum(d.tokens for d in inside)
    assert sum(report.tokens_by_category.values()) == in_tokens
    assert sum(report.tokens_by_state.values()) == in_tokens
    assert set(report.tokens_by_state) <= set(IN_CONTEXT)
    ranked = [d for d in inside if d.priority is not None]
    assert sum(report.tokens_by_priority.values()) == sum(d.tokens for d in ranked)
    assert report.used == report.framing + in_tokens + report.reserve_output
    assert total_tokens == report.used - report.reserve_output
    assert dict(report.messages_by_state) == {s: sum(d.state == s for d in rows) for s in STATES}
    assert all(d.tokens == 0 for d in rows if not d.in_context)
    assert all(d.tokens <= d.stored_tokens for d in rows if d.state == "compressed")
    assert report.earlier_entries >= 0 and report.earlier_tokens >= 0
    assert report.recalled_entries == sum(d.state == "recalled" for d in rows)
    as_json = report.to_dict()
    assert as_json["decisions"] == [d.to_dict() for d in rows]
    assert as_json["earlier"] == {
        "entries": report.earlier_entries,
        "tokens": report.earlier_tokens,
    }
