"""Model names as they are written: their spellings, globs, and the built-in catalogue's rules.

A name can carry a provider's prefixes (``openrouter/openai/gpt-4o``), a
fine-tune's wrapping (``ft:gpt-4o-mini:org::id``) or Bedrock's region and
vendor words (``us.anthropic.claude-…``): ``spellings`` lists the names
behind them. ``builtin_match`` finds one spelling in the built-in catalogue
(:mod:`ctxwindow.tokens.models`): an OpenAI family by exact name, alias,
dated snapshot or naming rule, then the longest built-in glob. A
``ModelRegistry`` (:mod:`ctxwindow.tokens.registry`) tries its configured
entries before these; ``builtin_entry`` is what a registry without them finds.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

from ctxwindow.tokens.models import ALIASES, FAMILIES, MODELS, OPENAI_PREFIXES, ModelInfo

_GLOB = frozenset("*?[")
_VENDOR = re.compile(r"[a-z][a-z_-]*\.(?=\w)", re.IGNORECASE)  # Bedrock's "us.", "openai."


def is_glob(pattern: str) -> bool:
    return not _GLOB.isdisjoint(pattern)


def spellings(name: str) -> list[str]:
    """``name``, then the names of the model behind its provider prefixes, in the order
    they are tried.

    Each ``/`` starts a shorter name (LiteLLM's ``openai/gpt-4o``, OpenRouter's
    ``openrouter/openai/gpt-4o``, ``azure/DEPLOYMENT``, a Hugging Face repo id);
    then an OpenAI fine-tune gives its base model (``ft:gpt-4o-mini:org::id``);
    last, Bedrock's region and vendor words go (``us.anthropic.claude-…``,
    ``openai.gpt-oss-120b-1:0``).

    >>> spellings("openrouter/openai/gpt-4o")
    ['openrouter/openai/gpt-4o', 'openai/gpt-4o', 'gpt-4o']
    >>> spellings("ft:gpt-4o-mini:acme::9xYz")
    ['ft:gpt-4o-mini:acme::9xYz', 'gpt-4o-mini']
    >>> spellings("bedrock/us.openai.gpt-oss-20b-1:0")[-1]
    'gpt-oss-20b-1:0'
    """
    found = [name]
    rest = name
    while "/" in rest:
        rest = rest.split("/", 1)[1]
        found.append(rest)
    if rest.startswith("ft:"):  # ft:BASE:ORG:SUFFIX:ID
        rest = rest[3:].split(":", 1)[0]
        found.append(rest)
    while vendor := _VENDOR.match(rest):
        rest = rest[vendor.end() :]
        found.append(rest)
    return list(dict.fromkeys(s for s in found if s))


def longest_first(entries: Mapping[str, ModelInfo]) -> list[tuple[str, ModelInfo]]:
    """Globs, the most specific (most literal characters) first."""
    return sorted(entries.items(), key=lambda kv: -sum(c not in _GLOB for c in kv[0]))


def example(glob: str) -> str:
    """A name ``glob`` matches: wildcards dropped, a character class's first character kept."""
    return re.sub(r"\[!?(.)[^\]]*\]", r"\1", glob).replace("*", "").replace("?", "x")


def builtin_entry(name: str) -> ModelInfo | None:
    """The built-in entry ``name`` matches, its spellings tried from the bare model up (a
    provider's name never changes what a built-in name means), or None."""
    for spelling in reversed(spellings(name)):
        if (found := builtin_match(spelling.lower())) is not None:
            return found
    return None


def builtin_match(lowered: str) -> ModelInfo | None:
    """The built-in entry of one spelling, lowercased: an OpenAI family (``openai_family``),
    then the longest built-in glob (``*claude-sonnet-4*``); or None."""
    family = openai_family(lowered)
    if family is not None:
        return MODELS[family]
    for pattern, info in _FAMILIES:
        if fnmatch.fnmatchcase(lowered, pattern):
            return info
    return None


def openai_family(name: str) -> str | None:
    """An OpenAI family by exact name, alias, dated snapshot (the longest name or alias
    + ``-``), then by OpenAI's naming rules (``OPENAI_PREFIXES``). No OpenAI name has a
    ``:``, so a ``:tag`` reads as ``-tag`` (Ollama's ``gpt-oss:20b``, OpenRouter's
    ``gpt-4o:free``, Bedrock's ``gpt-oss-120b-1:0``)."""
    name = name.replace(":", "-")
    if name in MODELS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    for known in _BY_LENGTH:
        if name.startswith(known + "-"):
            return ALIASES.get(known, known)
    for prefix in _PREFIXES_BY_LENGTH:
        if name.startswith(prefix):
            return OPENAI_PREFIXES[prefix]
    return None


_BY_LENGTH = sorted([*MODELS, *ALIASES], key=len, reverse=True)
_PREFIXES_BY_LENGTH = sorted(OPENAI_PREFIXES, key=len, reverse=True)
_FAMILIES = longest_first(FAMILIES)
