"""``TokenWindow``: the newest messages that fit a token budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.messages import Entry
from ctxwindow.policies._deprecated import keyword_only
from ctxwindow.policies.base import EvictHook, Oversize, Window
from ctxwindow.tokens.chat import ChatTokenizer


class TokenWindow(Window):
    """Keeps the newest whole messages whose prompt fits in ``max_tokens``.

    The budget covers what the model bills for the prompt (framing, reply
    priming and tool definitions included) plus ``reserve_output`` tokens kept
    free for the reply. ``total_tokens`` always equals
    ``count_tokens(window.messages(), model, tools)``.

    The budget and the model come by position, everything else by keyword
    (as for every window: ``TokenWindow(8000, "gpt-4o", system=…)``).

    >>> w = TokenWindow(60, system="Be brief.")
    >>> for i in range(20):
    ...     _ = w.add("user", f"message number {i}")
    >>> w.total_tokens <= 60, w.messages()[0]["role"]
    (True, 'system')
    """

    @keyword_only("system", "reserve_output")
    def __init__(
        self,
        max_tokens: int,
        model: str = "gpt-4o",
        *,
        system: str | None = None,
        reserve_output: int = 0,
        tools: Sequence[Mapping[str, Any]] | None = None,
        oversize: Oversize = "error",
        on_evict: EvictHook | None = None,
        tokenizer: ChatTokenizer | None = None,
        estimate: bool = False,
        low_water: float | None = None,
    ) -> None:
        if not isinstance(reserve_output, int) or reserve_output < 0:
            raise ValueError(
                f"reserve_output must be a non-negative integer, got {reserve_output!r}"
            )
        self.reserve_output = reserve_output
        super().__init__(
            max_tokens,
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
        return entry.tokens

    def _overhead(self) -> int:
        return self._base_tokens + self.reserve_output

    @property
    def max_tokens(self) -> int:
        return self.budget

    @max_tokens.setter
    def max_tokens(self, value: int) -> None:
        self.resize(value)
