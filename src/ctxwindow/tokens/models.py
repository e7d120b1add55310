"""The model registry: model name -> encoding, limits, prices, framing.

Names resolve by exact match first, then by the longest known prefix, so
dated snapshots (``gpt-4o-2024-08-06``) find their family. An unknown name is
an ``UnknownModelError`` that lists the known names; the estimator is never
chosen silently.

Prices are US dollars per million tokens (standard tier, uncached input) as
OpenAI published them; limits are the documented context window and maximum
output tokens.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ctxwindow.errors import UnknownModelError


@dataclass(frozen=True)
class ToolFraming:
    """Constants of OpenAI's published formula for counting tool definitions."""

    func_init: int
    prop_init: int = 3
    prop_key: int = 3
    enum_init: int = -3
    enum_item: int = 3
    func_end: int = 12


@dataclass(frozen=True)
class ImagePricing:
    """How image parts are billed: 512px tiles (``base`` + ``tile`` each) or 32px patches."""

    base: int = 85
    tile: int = 170
    patch_multiplier: float | None = None  # set for patch-billed models


@dataclass(frozen=True)
class ModelInfo:
    """What ctxwindow knows about one model family."""

    name: str
    encoding: str
    context_window: int
    max_output: int
    input_price: float  # $ per 1M input tokens
    output_price: float  # $ per 1M output tokens
    per_message: int = 3
    per_name: int = 1
    reply_priming: int = 3
    tools: ToolFraming = field(default_factory=lambda: ToolFraming(func_init=7))
    images: ImagePricing = field(default_factory=ImagePricing)

    def input_cost(self, tokens: int) -> float:
        """Dollars for ``tokens`` prompt tokens."""
        return tokens * self.input_price / 1_000_000


_CL100K_TOOLS = ToolFraming(func_init=10)
_O200K_TOOLS = ToolFraming(func_init=7)
_TILES_4O = ImagePricing(base=85, tile=170)


def _m(
    name: str,
    encoding: str,
    context: int,
    output: int,
    prices: tuple[float, float],
    images: ImagePricing = _TILES_4O,
) -> ModelInfo:
    tools = _CL100K_TOOLS if encoding == "cl100k_base" else _O200K_TOOLS
    return ModelInfo(name, encoding, context, output, *prices, tools=tools, images=images)


MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in [
        _m("gpt-3.5-turbo", "cl100k_base", 16_385, 4_096, (0.50, 1.50)),
        _m("gpt-4", "cl100k_base", 8_192, 8_192, (30.0, 60.0)),
        _m("gpt-4-32k", "cl100k_base", 32_768, 8_192, (60.0, 120.0)),
        _m("gpt-4-turbo", "cl100k_base", 128_000, 4_096, (10.0, 30.0)),
        _m("gpt-4o", "o200k_base", 128_000, 16_384, (2.50, 10.0)),
        _m("gpt-4o-mini", "o200k_base", 128_000, 16_384, (0.15, 0.60), ImagePricing(2833, 5667)),
        _m("gpt-4.1", "o200k_base", 1_047_576, 32_768, (2.0, 8.0)),
        _m("gpt-4.1-mini", "o200k_base", 1_047_576, 32_768, (0.40, 1.60), ImagePricing(0, 0, 1.62)),
        _m("gpt-4.1-nano", "o200k_base", 1_047_576, 32_768, (0.10, 0.40), ImagePricing(0, 0, 2.46)),
        _m("o1", "o200k_base", 200_000, 100_000, (15.0, 60.0), ImagePricing(75, 150)),
        _m("o1-mini", "o200k_base", 128_000, 65_536, (1.10, 4.40), ImagePricing(75, 150)),
        _m("o3", "o200k_base", 200_000, 100_000, (2.0, 8.0), ImagePricing(75, 150)),
        _m("o3-mini", "o200k_base", 200_000, 100_000, (1.10, 4.40), ImagePricing(75, 150)),
        _m("o4-mini", "o200k_base", 200_000, 100_000, (1.10, 4.40), ImagePricing(0, 0, 1.72)),
        _m("gpt-5", "o200k_base", 400_000, 128_000, (1.25, 10.0), ImagePricing(70, 140)),
        _m("gpt-5-mini", "o200k_base", 400_000, 128_000, (0.25, 2.0), ImagePricing(0, 0, 1.62)),
        _m("gpt-5-nano", "o200k_base", 400_000, 128_000, (0.05, 0.40), ImagePricing(0, 0, 2.46)),
        _m("gpt-5-chat-latest", "o200k_base", 128_000, 16_384, (1.25, 10.0), ImagePricing(70, 140)),
    ]
}

# Names that are not a prefix of their family's name.
ALIASES = {
    "gpt-4-1106-preview": "gpt-4-turbo",
    "gpt-4-0125-preview": "gpt-4-turbo",
    "gpt-4-turbo-preview": "gpt-4-turbo",
    "gpt-4-vision-preview": "gpt-4-turbo",
    "chatgpt-4o-latest": "gpt-4o",
}


def model_info(name: str) -> ModelInfo:
    """Resolve a model name: exact, then alias, then the longest prefix followed by ``-``."""
    if name in MODELS:
        return MODELS[name]
    if name in ALIASES:
        return MODELS[ALIASES[name]]
    family = _longest_prefix(name)
    if family is not None:
        return MODELS[family]
    raise UnknownModelError(_unknown_message(name))


def known_models() -> list[str]:
    """Every name the registry resolves exactly."""
    return sorted([*MODELS, *ALIASES])


def _longest_prefix(name: str) -> str | None:
    # "gpt-4o-mini-2024-07-18" must find gpt-4o-mini, not gpt-4o: longest first.
    for family in sorted(MODELS, key=len, reverse=True):
        if name.startswith(family + "-"):
            return family
    return None


def _unknown_message(name: str) -> str:
    close = difflib.get_close_matches(name, known_models(), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return (
        f"unknown model {name!r}.{hint} Known models: {', '.join(known_models())} "
        "(and their dated snapshots). For a model without a public tokenizer pass "
        "estimate=True (CLI: --estimate) to use the character-based estimator."
    )
