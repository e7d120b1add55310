"""The model catalogue: what ctxwindow knows about a model family out of the box.

A ``ModelInfo`` gives a family's context window, maximum output, prices and
its counter: a tiktoken ``encoding`` (exact), a Hugging Face ``tokenizer``
(a local ``tokenizer.json``; exact) or an ``estimate`` (characters per token
with a safety margin, for models whose tokenizer is not public). Models can be
added or changed by configuration (:mod:`ctxwindow.tokens.registry`); this
module holds the built-in entries (``model_info``, which resolves a name
through the process's registry, is in :mod:`ctxwindow.tokens.defaults`).

OpenAI families are matched by name, alias or dated snapshot
(``gpt-4o-2024-08-06`` finds ``gpt-4o``), then by OpenAI's naming rules
(``OPENAI_PREFIXES``, tiktoken's prefix table: ``gpt-5.2`` is a GPT-5). The
other families are globs (``*claude-sonnet-4*``, ``*llama-3.[123]*``) so that
the names gateways give them (``anthropic/claude-sonnet-4.5``,
``meta-llama/Llama-3.1-8B-Instruct``, ``llama3.1:8b``) resolve too; the
longest matching glob wins. Provider prefixes (``openai/gpt-4o``) are the
registry's business (:func:`ctxwindow.tokens.registry.spellings`).

Prices are US dollars per million tokens (standard tier, uncached input) as
the providers publish them; 0 means not priced (open weights you serve
yourself). Limits are the documented context window and maximum output; an
open model's maximum output is its window. docs/models.md says where every
number comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ctxwindow._moved import warn_moved

if TYPE_CHECKING:  # their old import path (see ``__getattr__``)
    from ctxwindow.tokens.defaults import known_models as known_models
    from ctxwindow.tokens.defaults import model_info as model_info

_MOVED = ("known_models", "model_info")  # to ctxwindow.tokens.defaults

StrictRoles = Literal["merge", "bridge"]


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
class Estimate:
    """The estimator's parameters for one family (see ``EstimateCounter``).

    ``tokens = ceil((wide * tokens_per_wide + narrow / chars_per_token) * margin)``
    where ``wide`` counts CJK and emoji characters and ``narrow`` the rest.
    """

    margin: float = 1.2
    chars_per_token: float = 4.0
    tokens_per_wide: float = 1.0


@dataclass(frozen=True)
class ModelInfo:
    """What ctxwindow knows about one model family (or one configured entry).

    Exactly one counter applies: ``tokenizer`` if set, else ``estimate`` if
    set, else ``encoding``. ``name`` is the family (or the entry's name or
    glob); ``source`` says where the entry comes from.
    """

    name: str
    encoding: str | None
    context_window: int
    max_output: int
    input_price: float = 0.0  # $ per 1M input tokens
    output_price: float = 0.0  # $ per 1M output tokens
    # $ per 1M prompt tokens a provider serves from its prompt cache, and (Anthropic)
    # per 1M tokens written to it; None: no cache price known (billed as input).
    cached_input_price: float | None = None
    cache_write_price: float | None = None
    cache: Literal["prefix", "breakpoints"] | None = None  # OpenAI's or Anthropic's kind
    per_message: int = 3
    per_name: int = 1
    reply_priming: int = 3
    tools: ToolFraming = field(default_factory=lambda: ToolFraming(func_init=7))
    images: ImagePricing = field(default_factory=ImagePricing)
    tokenizer: str | None = None  # a local tokenizer.json, or a folder holding one
    estimate: Estimate | None = None
    strict_roles: StrictRoles | None = None  # make the built context alternate roles
    source: str = "built-in"

    @property
    def counter(self) -> Literal["tokenizer", "estimate", "encoding"]:
        """Which counter counts for this model."""
        if self.tokenizer is not None:
            return "tokenizer"
        return "estimate" if self.estimate is not None else "encoding"

    @property
    def estimated(self) -> bool:
        """Whether counts are estimates rather than what the provider bills."""
        return self.counter == "estimate"

    def input_cost(self, tokens: int, cached: int = 0, written: int = 0) -> float:
        """Dollars for ``tokens`` prompt tokens, ``cached`` of them read from the provider's
        prompt cache and ``written`` of them written to it (Anthropic's breakpoints)."""
        read_price, write_price = self.cached_input_price, self.cache_write_price
        read_price = self.input_price if read_price is None else read_price
        write_price = self.input_price if write_price is None else write_price
        plain = tokens - cached - written
        return (plain * self.input_price + cached * read_price + written * write_price) / 1e6


_CL100K_TOOLS = ToolFraming(func_init=10)
_O200K_TOOLS = ToolFraming(func_init=7)
_TILES_4O = ImagePricing(base=85, tile=170)
_TILES_4O_MINI = ImagePricing(2833, 5667)
_TILES_O = ImagePricing(75, 150)
_TILES_5 = ImagePricing(70, 140)
_PATCHES_MINI = ImagePricing(0, 0, 1.62)  # 32-pixel patches, times the multiplier
_PATCHES_NANO = ImagePricing(0, 0, 2.46)
_PATCHES_O4 = ImagePricing(0, 0, 1.72)


def _m(
    name: str,
    encoding: str,
    context: int,
    output: int,
    prices: tuple[float, float] | tuple[float, float, float],
    images: ImagePricing = _TILES_4O,
) -> ModelInfo:
    """An OpenAI model: prices of input, output and (its automatic prefix cache) cached input."""
    cached = prices[2] if len(prices) == 3 else None
    tools = _CL100K_TOOLS if encoding == "cl100k_base" else _O200K_TOOLS
    return ModelInfo(
        name, encoding, context, output, *prices[:2], tools=tools, images=images,
        cached_input_price=cached, cache=None if cached is None else "prefix",
    )  # fmt: skip


MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in [
        _m("gpt-3.5-turbo", "cl100k_base", 16_385, 4_096, (0.50, 1.50)),
        _m("gpt-4", "cl100k_base", 8_192, 8_192, (30.0, 60.0)),
        _m("gpt-4-32k", "cl100k_base", 32_768, 8_192, (60.0, 120.0)),
        _m("gpt-4-turbo", "cl100k_base", 128_000, 4_096, (10.0, 30.0)),
        _m("gpt-4o", "o200k_base", 128_000, 16_384, (2.50, 10.0, 1.25)),
        _m("gpt-4o-mini", "o200k_base", 128_000, 16_384, (0.15, 0.60, 0.075), _TILES_4O_MINI),
        _m("gpt-4.1", "o200k_base", 1_047_576, 32_768, (2.0, 8.0, 0.50)),
        _m("gpt-4.1-mini", "o200k_base", 1_047_576, 32_768, (0.40, 1.60, 0.10), _PATCHES_MINI),
        _m("gpt-4.1-nano", "o200k_base", 1_047_576, 32_768, (0.10, 0.40, 0.025), _PATCHES_NANO),
        _m("gpt-4.5-preview", "o200k_base", 128_000, 16_384, (75.0, 150.0, 37.5)),
        _m("o1", "o200k_base", 200_000, 100_000, (15.0, 60.0, 7.50), _TILES_O),
        _m("o1-mini", "o200k_base", 128_000, 65_536, (1.10, 4.40, 0.55), _TILES_O),
        _m("o1-pro", "o200k_base", 200_000, 100_000, (150.0, 600.0), _TILES_O),
        _m("o3", "o200k_base", 200_000, 100_000, (2.0, 8.0, 0.50), _TILES_O),
        _m("o3-mini", "o200k_base", 200_000, 100_000, (1.10, 4.40, 0.55), _TILES_O),
        _m("o3-pro", "o200k_base", 200_000, 100_000, (20.0, 80.0), _TILES_O),
        _m("o4-mini", "o200k_base", 200_000, 100_000, (1.10, 4.40, 0.275), _PATCHES_O4),
        _m("gpt-5", "o200k_base", 400_000, 128_000, (1.25, 10.0, 0.125), _TILES_5),
        _m("gpt-5-mini", "o200k_base", 400_000, 128_000, (0.25, 2.0, 0.025), _PATCHES_MINI),
        _m("gpt-5-nano", "o200k_base", 400_000, 128_000, (0.05, 0.40, 0.005), _PATCHES_NANO),
        _m("gpt-5-chat-latest", "o200k_base", 128_000, 16_384, (1.25, 10.0, 0.125), _TILES_5),
        _m("gpt-5-pro", "o200k_base", 400_000, 272_000, (15.0, 120.0), _TILES_5),
        _m("gpt-5.1", "o200k_base", 400_000, 128_000, (1.25, 10.0, 0.125), _TILES_5),
        _m("gpt-5.1-chat-latest", "o200k_base", 128_000, 16_384, (1.25, 10.0, 0.125), _TILES_5),
        _m("gpt-oss-120b", "o200k_base", 131_072, 131_072, (0.0, 0.0)),
        _m("gpt-oss-20b", "o200k_base", 131_072, 131_072, (0.0, 0.0)),
    ]
}

# Names that are not a prefix of their family's name.
ALIASES = {
    "gpt-4-1106-preview": "gpt-4-turbo",
    "gpt-4-0125-preview": "gpt-4-turbo",
    "gpt-4-turbo-preview": "gpt-4-turbo",
    "gpt-4-vision-preview": "gpt-4-turbo",
    "chatgpt-4o-latest": "gpt-4o",
    "gpt-3.5": "gpt-3.5-turbo",
    "gpt-35-turbo": "gpt-3.5-turbo",  # Azure's spelling
}

# OpenAI's naming rules, after tiktoken's MODEL_PREFIX_TO_ENCODING: a name no entry or
# alias above names, nor a dated snapshot of one, that starts with a prefix here is a new
# member of that family: its encoding, and the family's limits and prices until the table
# above lists it. gpt-6, o5 and other names no rule covers are refused: their tokenizer is
# not known yet.
OPENAI_PREFIXES = {
    "gpt-5": "gpt-5",  # gpt-5.2, gpt-5-codex (no "-": tiktoken's rule too)
    "gpt-4.5-": "gpt-4.5-preview",
    "gpt-4.1-": "gpt-4.1",
    "chatgpt-4o-": "gpt-4o",
    "gpt-4o-": "gpt-4o",
    "gpt-4-": "gpt-4",
    "gpt-3.5-turbo-": "gpt-3.5-turbo",
    "gpt-35-turbo-": "gpt-3.5-turbo",
    "gpt-oss-": "gpt-oss-120b",
    "o1-": "o1",
    "o3-": "o3",
    "o4-mini-": "o4-mini",
}

# -- families without an offline tokenizer in any package: the estimator ----------------
# Measured by tools/measure_estimates.py against each family's real tokenizer
# on English prose, Chinese prose and code (docs/models.md, "How the estimates
# were measured"): chars_per_token and tokens_per_wide are conservative fits,
# the margin makes the estimate at or above the true count on 99 % of samples.
CLAUDE = Estimate(margin=1.10, chars_per_token=3.33, tokens_per_wide=1.13)  # proxy: see docs
GEMINI = Estimate(margin=1.15, chars_per_token=3.03, tokens_per_wide=0.77)  # proxy: Gemma 3
LLAMA3 = Estimate(margin=1.15, chars_per_token=3.45, tokens_per_wide=0.90)
QWEN = Estimate(margin=1.15, chars_per_token=3.43, tokens_per_wide=0.84)
MISTRAL_TEKKEN = Estimate(margin=1.20, chars_per_token=3.34, tokens_per_wide=1.13)
MISTRAL_SP = Estimate(margin=1.15, chars_per_token=2.90, tokens_per_wide=1.31)  # sentencepiece
DEEPSEEK = Estimate(margin=1.15, chars_per_token=3.34, tokens_per_wide=0.76)
PHI3 = Estimate(margin=1.15, chars_per_token=2.90, tokens_per_wide=1.32)  # Llama 2's tokenizer
PHI4 = Estimate(margin=1.15, chars_per_token=3.45, tokens_per_wide=1.16)  # cl100k_base's
GROK = Estimate(margin=1.15, chars_per_token=3.04, tokens_per_wide=1.47)  # proxy: Grok-1

ESTIMATES = {
    "Claude": CLAUDE, "Gemini": GEMINI, "Llama 3": LLAMA3, "Qwen": QWEN,
    "Mistral Tekken": MISTRAL_TEKKEN, "Mistral SP": MISTRAL_SP, "DeepSeek": DEEPSEEK,
    "Phi-3": PHI3, "Phi-4": PHI4, "Grok": GROK,
}  # fmt: skip
"""The built-in estimates by the name docs/models.md gives them."""


def _e(
    glob: str,
    estimate: Estimate,
    context: int,
    output: int | None = None,
    prices: tuple[float, float] = (0.0, 0.0),
    *,
    per_message: int = 4,
    reply_priming: int = 4,
) -> ModelInfo:
    cache: dict[str, Any] = {}
    if estimate is CLAUDE:  # cache reads at 10 % of input, writes (5 minutes) at 125 %
        cache = {"cached_input_price": prices[0] * 0.1, "cache_write_price": prices[0] * 1.25,
                 "cache": "breakpoints"}  # fmt: skip
    return ModelInfo(
        glob, None, context, output or context, *prices, estimate=estimate,
        per_message=per_message, reply_priming=reply_priming,
        tools=_CL100K_TOOLS, **cache,
    )  # fmt: skip


# Globs, matched case-insensitively; the longest matching one wins.
FAMILIES: dict[str, ModelInfo] = {
    m.name: m
    for m in [
        # Anthropic: 200k windows (1M for Sonnet 4/4.5 in beta is opt-in, not assumed).
        _e("*claude-*", CLAUDE, 200_000, 8_192, (3.0, 15.0)),
        _e("*claude-3-haiku*", CLAUDE, 200_000, 4_096, (0.25, 1.25)),
        _e("*claude-3-opus*", CLAUDE, 200_000, 4_096, (15.0, 75.0)),
        _e("*claude-3-5-haiku*", CLAUDE, 200_000, 8_192, (0.80, 4.0)),
        _e("*claude-3-5-sonnet*", CLAUDE, 200_000, 8_192, (3.0, 15.0)),
        _e("*claude-3-7-sonnet*", CLAUDE, 200_000, 64_000, (3.0, 15.0)),
        _e("*claude-sonnet-4*", CLAUDE, 200_000, 64_000, (3.0, 15.0)),
        _e("*claude-opus-4*", CLAUDE, 200_000, 32_000, (15.0, 75.0)),
        _e("*claude-opus-4-5*", CLAUDE, 200_000, 64_000, (5.0, 25.0)),
        _e("*claude-opus-4.5*", CLAUDE, 200_000, 64_000, (5.0, 25.0)),
        _e("*claude-haiku-4*", CLAUDE, 200_000, 64_000, (1.0, 5.0)),
        # Google
        _e("*gemini-*", GEMINI, 1_048_576, 8_192, (0.10, 0.40)),
        _e("*gemini-1.5-pro*", GEMINI, 2_097_152, 8_192, (1.25, 5.0)),
        _e("*gemini-2.5-pro*", GEMINI, 1_048_576, 65_536, (1.25, 10.0)),
        _e("*gemini-2.5-flash*", GEMINI, 1_048_576, 65_536, (0.30, 2.50)),
        _e("*gemini-2.5-flash-lite*", GEMINI, 1_048_576, 65_536, (0.10, 0.40)),
        _e("*gemma-3*", GEMINI, 131_072),
        # Meta: Llama 3 has 8k, Llama 3.1, 3.2 and 3.3 128k.
        _e("llama3", LLAMA3, 8_192),
        _e("*llama-3-*", LLAMA3, 8_192),
        _e("*llama3:*", LLAMA3, 8_192),
        _e("*llama3-*", LLAMA3, 8_192),
        _e("*llama-3.[123]*", LLAMA3, 131_072),
        _e("*llama3.[123]*", LLAMA3, 131_072),
        _e("*llama-v3p[123]*", LLAMA3, 131_072),
        # Alibaba: Qwen 2.5 and 3 natively 32k (more with YaRN, which servers opt into).
        _e("*qwen2.5*", QWEN, 32_768),
        _e("*qwen3*", QWEN, 32_768),
        _e("*qwen3*2507*", QWEN, 262_144),
        # Mistral
        _e("*mistral-large*", MISTRAL_SP, 131_072, None, (2.0, 6.0)),
        _e("*mistral-medium*", MISTRAL_TEKKEN, 131_072, None, (0.40, 2.0)),
        _e("*mistral-small*", MISTRAL_TEKKEN, 131_072, None, (0.10, 0.30)),
        _e("*mistral-nemo*", MISTRAL_TEKKEN, 131_072, None, (0.15, 0.15)),
        _e("*ministral-*", MISTRAL_TEKKEN, 131_072, None, (0.10, 0.10)),
        _e("*codestral*", MISTRAL_TEKKEN, 262_144, None, (0.30, 0.90)),
        _e("*mistral-7b*", MISTRAL_SP, 32_768),
        _e("mistral", MISTRAL_SP, 32_768),
        _e("mistral:*", MISTRAL_SP, 32_768),
        _e("*mixtral-8x7b*", MISTRAL_SP, 32_768),
        _e("*mixtral-8x22b*", MISTRAL_SP, 65_536),
        # DeepSeek: the API serves 128k; the open V3/R1 weights 160k.
        _e("deepseek-chat", DEEPSEEK, 131_072, 8_192, (0.28, 0.42)),
        _e("deepseek-reasoner", DEEPSEEK, 131_072, 65_536, (0.28, 0.42)),
        _e("*deepseek-v3*", DEEPSEEK, 163_840),
        _e("*deepseek-r1*", DEEPSEEK, 163_840),
        # Microsoft: Phi-3 mini and medium have Llama 2's tokenizer, Phi-3 small and Phi-4
        # a cl100k_base one (Phi-4 mini an o200k_base one, which PHI4 covers too: measured).
        _e("*phi3*", PHI3, 4_096),
        _e("*phi-3*", PHI3, 4_096),
        _e("*phi3*128k*", PHI3, 131_072),
        _e("*phi-3*128k*", PHI3, 131_072),
        _e("*phi3.5*", PHI3, 131_072),
        _e("*phi-3.5*", PHI3, 131_072),
        _e("*phi-3-small*", PHI4, 8_192),
        _e("*phi-3-small*128k*", PHI4, 131_072),
        _e("*phi4*", PHI4, 16_384),
        _e("*phi-4*", PHI4, 16_384),
        _e("*phi4-mini*", PHI4, 131_072),
        _e("*phi-4-mini*", PHI4, 131_072),
        _e("*phi4-reasoning*", PHI4, 32_768),
        _e("*phi-4-reasoning*", PHI4, 32_768),
        # xAI: no tokenizer of Grok 3 or 4 is published (GROK is Grok-1's).
        _e("*grok-*", GROK, 131_072, None, (3.0, 15.0)),
        _e("*grok-3*", GROK, 131_072, None, (3.0, 15.0)),
        _e("*grok-3-mini*", GROK, 131_072, None, (0.30, 0.50)),
        _e("*grok-4*", GROK, 256_000, None, (3.0, 15.0)),
        _e("*grok-4-fast*", GROK, 2_000_000, None, (0.20, 0.50)),
        _e("*grok-4-1-fast*", GROK, 2_000_000, None, (0.20, 0.50)),
        _e("*grok-4.1-fast*", GROK, 2_000_000, None, (0.20, 0.50)),
        _e("*grok-code-fast*", GROK, 256_000, None, (0.20, 1.50)),
    ]
}


def __getattr__(name: str) -> Any:
    """``model_info`` and ``known_models`` live in :mod:`ctxwindow.tokens.defaults`, above
    the registry they ask; importing them from here still works, with a ``DeprecationWarning``."""
    if name in _MOVED:
        warn_moved(__name__, name, "ctxwindow.tokens")
        from ctxwindow.tokens import defaults  # only for the old import path

        return getattr(defaults, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
