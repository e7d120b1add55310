"""The default window policy (``hybrid_policy``) and how a budget is read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxwindow.policies import Folding, Keeping, PriorityWindow, Window
from ctxwindow.recall import RECENT_MESSAGES
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.defaults import default_models
from ctxwindow.tokens.registry import ModelRegistry

Policy = Callable[[int, ChatTokenizer], Window]
"""Makes a session's window for a budget: ``policy(budget, tokenizer)``."""


def default_budget(
    model: str, budget: int | float, reserve_output: int, *, models: ModelRegistry | None = None
) -> int:
    """An int budget as given; a ratio of the model's context window minus the reply reserve."""
    if isinstance(budget, int) and not isinstance(budget, bool):
        if budget < 1:
            raise ValueError(f"budget must be positive, got {budget}")
        return budget
    if not 0 < budget <= 1:
        raise ValueError(f"a budget ratio must be in (0, 1], got {budget}")
    window = (models or default_models()).resolve(model).context_window
    return max(1, int(window * budget) - reserve_output)


COMPRESSORS = ("chain", "structured", "extractive", "truncate", "off")


LOW_WATER = 0.85  # the hybrid's step: down to 85 % of the room beside what is pinned


def hybrid_policy(
    summarizer: Any = None, *, summary: bool = True, compressor: str = "chain", cache: bool = True
) -> Policy:
    """The default policy: a PriorityWindow with compressors and a rolling summary.

    Units above a quarter of the budget (at most 2,000 tokens) are compressed
    before eviction by ``compressor``: ``"chain"`` (structured JSON, then
    extractive, then head/tail), one of those alone, or ``"off"``. The rolling
    summary (``summarizer``, extractive by default; none without ``summary``)
    gets an eighth of the budget (at most 800). A message larger than the
    whole budget is compressed, or dropped if even that does not fit. With
    ``cache`` (the default) the window evicts in steps, down to ``LOW_WATER``
    of its room, so the prompt prefix stays the same between steps and the
    provider's prompt cache serves it (docs/caching.md).
    """
    if compressor not in COMPRESSORS:
        raise ValueError(f"compressor must be one of {COMPRESSORS}, got {compressor!r}")

    def make(budget: int, tokenizer: ChatTokenizer) -> Window:
        from ctxwindow.compress import Extractive, RollingSummary

        rolling = RollingSummary(summarizer or Extractive(tokenizer), tokenizer)
        return PriorityWindow(
            budget,
            tokenizer.model,
            tokenizer=tokenizer,
            oversize="drop",
            keeping=Keeping(recent_messages=RECENT_MESSAGES),
            folding=Folding(
                compressor=_compressor(compressor, tokenizer),
                compress_threshold=min(2000, budget // 4),
                summarizer=rolling.fold if summary else None,
                summary_tokens=min(800, budget // 8),
            ),
            low_water=LOW_WATER if cache else None,
        )

    return make


def _compressor(name: str, tokenizer: ChatTokenizer) -> Any:
    from ctxwindow.compress import Chain, Extractive, Structured, Truncate

    one = {"structured": Structured, "extractive": Extractive, "truncate": Truncate}
    if name == "chain":
        return Chain(Structured(tokenizer), Extractive(tokenizer), Truncate(tokenizer))
    return one[name](tokenizer) if name in one else None
