"""A short tour: a token window keeping a chat inside 300 tokens.

Run with ``make demo``. It adds a conversation turn by turn (English, Chinese,
Japanese, emoji and a tool call), prints what each turn costs, what the window
evicted to stay in budget, and checks the running total against a full recount.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ctxwindow import MessageWindow, TokenWindow, Unit, count_tokens

TURNS: list[dict[str, object]] = [
    {"role": "user", "content": "Hi! My order number is A-1042 and it has not arrived yet."},
    {"role": "assistant", "content": "Sorry to hear that. Let me look up order A-1042 for you."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "track_order", "arguments": '{"order": "A-1042"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"status": "in transit", "carrier": "SF Express", "eta": "2026-12-02"}',
    },
    {"role": "assistant", "content": "It is in transit with SF Express and should arrive Dec 2."},
    {"role": "user", "content": "谢谢！顺便问一下，你们支持把包裹改寄到公司地址吗？"},
    {"role": "assistant", "content": "可以的，请提供新的收货地址和联系电话，我来帮您修改。"},
    {"role": "user", "content": "ありがとうございます。配達時間の指定もできますか？"},
    {"role": "assistant", "content": "はい、午前・午後・夜間から選べます。🚚📦"},
    {"role": "user", "content": "Great 👍 please deliver in the evening, and text me first."},
    {"role": "assistant", "content": "Done: evening delivery, with a text message beforehand."},
]


def show_token_window(console: Console) -> None:
    evicted: list[Unit] = []
    window = TokenWindow(
        max_tokens=300,
        model="gpt-4o",
        system="You are a courteous support agent for an online shop.",
        reserve_output=100,
        on_evict=evicted.extend,
    )
    table = Table(title="TokenWindow(max_tokens=300, reserve_output=100, model='gpt-4o')")
    for column in ("turn", "role", "message tokens", "window tokens", "kept", "evicted so far"):
        table.add_column(column, justify="right" if column != "role" else "left")
    for i, message in enumerate(TURNS, 1):
        entry = window.add(message)
        tokens = entry.tokens if entry else 0
        assert window.total_tokens == count_tokens(window.messages(), model="gpt-4o")
        kept = len(window)
        gone = sum(len(unit.entries) for unit in evicted)
        table.add_row(
            str(i),
            str(message["role"]),
            str(tokens),
            str(window.total_tokens),
            str(kept),
            str(gone),
        )
    console.print(table)
    console.print(
        f"Budget used: {window.total_tokens} prompt tokens + {window.reserve_output} reserved "
        f"for the reply <= {window.max_tokens}. The running total equals a full recount."
    )
    console.print("Window now (system prompt first, tool call kept whole or not at all):")
    for message in window.messages():
        console.print(f"  [bold]{message['role']:>9}[/]  {_preview(message)}")
    window.resize(200)
    console.print(
        f"\nAfter resize(200): {len(window)} messages, {window.total_tokens} tokens "
        f"(evicted at once; system prompt kept: {window.messages()[0]['role'] == 'system'})."
    )


def show_message_window(console: Console) -> None:
    window = MessageWindow(max_messages=4, system="You are a courteous support agent.")
    window.extend(TURNS)
    console.print(
        f"\nMessageWindow(max_messages=4): kept {len(window)} messages, "
        f"{window.total_tokens} tokens:"
    )
    for message in window.messages():
        console.print(f"  [bold]{message['role']:>9}[/]  {_preview(message)}")


def _preview(message: dict[str, object]) -> str:
    content = message.get("content")
    if content is None:
        calls = message.get("tool_calls") or []
        return "tool call: " + ", ".join(c["function"]["name"] for c in calls)  # type: ignore[index,union-attr]
    text = str(content)
    return text if len(text) <= 70 else text[:67] + "..."


if __name__ == "__main__":
    console = Console()
    show_token_window(console)
    show_message_window(console)
