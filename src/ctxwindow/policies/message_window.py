"""``MessageWindow``: the last N messages, never cutting a tool unit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.messages import SYSTEM_ROLES, Entry
from ctxwindow.policies._deprecated import system_second
from ctxwindow.policies.base import EvictHook, Oversize, Window
from ctxwindow.tokens.chat import ChatTokenizer


class MessageWindow(Window):
    """Keeps at most ``max_messages`` messages, system messages not counted.

    Neither the system prompt nor ``system``/``developer`` messages count;
    other pinned messages count against the limit. Tool calls and their results
    leave together, so the window may hold fewer than ``max_messages`` right
    after evicting a tool unit. Tokens are still counted once per message so
    that ``total_tokens`` is known; ``oversize`` may be ``"error"`` or
    ``"drop"`` (a tool unit with more messages than the limit).

    Its second positional is the model, as for every window (it used to be
    the system prompt): ``MessageWindow(20, "gpt-4o", system="Be brief.")``.
    The model still matters here, since ``total_tokens`` is counted.
    """

    budget_in_tokens = False

    @system_second
    def __init__(
        self,
        max_messages: int,
        model: str = "gpt-4o",
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        oversize: Oversize = "error",
        on_evict: EvictHook | None = None,
        tokenizer: ChatTokenizer | None = None,
        estimate: bool = False,
        low_water: float | None = None,
    ) -> None:
        if oversize == "truncate":
            raise ValueError("a MessageWindow cannot truncate: use oversize='error' or 'drop'")
        super().__init__(
            max_messages,
            model=model,
            system=system,
            tools=tools,
            oversize=oversize,
            on_evict=on_evict,
            tokenizer=tokenizer,
            estimate=estimate,
            low_water=low_water,
        )

    def _size_of(self, entry: Entry) -> int:
        return 0 if entry.message["role"] in SYSTEM_ROLES else 1

    @property
    def max_messages(self) -> int:
        return self.budget

    @max_messages.setter
    def max_messages(self, value: int) -> None:
        self.resize(value)
