"""Models as configuration: which window, limits and counter a model name gets.

A ``ModelRegistry`` resolves a name in this order, trying each of its
``spellings`` (the name, then the model behind each provider prefix:
``openrouter/openai/gpt-4o``, ``openai/gpt-4o``, ``gpt-4o``) at each step:

1. configured entries, for each spelling from the whole name down: the
   exact name, then the longest glob that matches (``meta-llama/*``,
   ``qwen2.5:*``; case-insensitive);
2. the built-in catalogue (:mod:`ctxwindow.tokens.models`), for each
   spelling from the bare model up: exact name, alias or dated snapshot of
   an OpenAI family, OpenAI's naming rules (``gpt-5.2``), then the longest
   built-in glob (``*claude-sonnet-4*``); case-insensitive;
3. the default for names nothing matches: ``unknown="refuse"`` raises
   ``UnknownModelError``; ``unknown="estimate"`` counts with the estimator.

Entries come from a TOML or JSON file, a mapping (``CTXWINDOW_MODELS``, the
service's settings) or code. Every field is checked when the registry is
built, and every tokenizer file is loaded then, so a bad entry fails at
start-up with one ``ModelConfigError`` naming the entry and the field::

    # models.toml
    unknown = "estimate"            # or "refuse" (the default)

    [models."meta-llama/*"]
    context_window = 131072
    tokenizer = "llama3/tokenizer.json"   # relative to this file
    strict_roles = "merge"

    [models."qwen2.5:*"]
    context_window = 32768
    estimate = { margin = 1.15, chars_per_token = 3.6, tokens_per_wide = 0.8 }

    [models."claude-sonnet-4-5"]      # a built-in name: only what changes
    context_window = 1000000

The process has one default registry, used wherever a model is named without
one (``chat_tokenizer``, ``model_info``, the windows): ``default_models`` in
:mod:`ctxwindow.tokens.defaults`, which sits above this module.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import threading
import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ctxwindow.configfile import read_table
from ctxwindow.errors import CtxWindowError, ModelConfigError, UnknownModelError
from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer
from ctxwindow.tokens.counter import CachedCounter, EstimateCounter, TiktokenCounter
from ctxwindow.tokens.encodings import SPECS
from ctxwindow.tokens.models import (
    ALIASES,
    FAMILIES,
    MODELS,
    OPENAI_PREFIXES,
    Estimate,
    ModelInfo,
    StrictRoles,
)

if TYPE_CHECKING:  # their old import path (see ``__getattr__``)
    from ctxwindow.tokens.defaults import default_models as default_models
    from ctxwindow.tokens.defaults import models_from_env as models_from_env
    from ctxwindow.tokens.defaults import use_models as use_models

Unknown = Literal["refuse", "estimate"]
UNKNOWN: tuple[Unknown, ...] = ("refuse", "estimate")
STRICT: tuple[StrictRoles, ...] = ("merge", "bridge")
UNKNOWN_ESTIMATE = Estimate(margin=1.20, chars_per_token=3.03, tokens_per_wide=1.13)
"""The estimator for names nothing matches: fitted on the measured families' samples pooled
(docs/models.md)."""

_FIELDS = (
    "context_window", "max_output", "encoding", "tokenizer", "estimate",
    "input_price", "output_price", "cached_input_price", "cache_write_price", "strict_roles",
)  # fmt: skip
_COUNTERS = ("encoding", "tokenizer", "estimate")
_GLOB = frozenset("*?[")
_DEFAULT_SOURCE = "default for unknown models"
_DEFAULT_KEY = "\0default"
_MISSING = object()
_REMEMBERED = 4096
_MESSAGE_MAX = 180  # an unknown name's error, so that "ctxwindow: error: " + it is < 200
_MOVED = ("default_models", "models_from_env", "use_models")  # to ctxwindow.tokens.defaults
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


class ModelRegistry:
    """Model entries (configured first, then built-in) and the counters they make.

    ``entries`` are ``ModelInfo``s whose ``name`` is an exact name or a glob.
    ``unknown`` is what a name nothing matches gets: ``"refuse"``
    (``UnknownModelError``) or ``"estimate"`` (``unknown_estimate``).
    Counters are made once per entry and shared.
    """

    def __init__(
        self,
        entries: Mapping[str, ModelInfo] | None = None,
        *,
        unknown: Unknown = "refuse",
        unknown_estimate: Estimate = UNKNOWN_ESTIMATE,
        builtins: bool = True,
    ) -> None:
        if unknown not in UNKNOWN:
            raise ModelConfigError(f"unknown: must be one of {', '.join(UNKNOWN)}, got {unknown!r}")
        configured = dict(entries or {})
        self.unknown: Unknown = unknown
        self.unknown_estimate = unknown_estimate
        self.builtins = builtins
        self._exact = {k: v for k, v in configured.items() if not is_glob(k)}
        self._globs = _longest_first({k: v for k, v in configured.items() if is_glob(k)})
        self._families = _longest_first(FAMILIES) if builtins else []
        self._tokenizers: dict[str, ChatTokenizer] = {}
        self._found: dict[str, object] = {}
        self._lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        """Registries are equal when they resolve every name alike (counters aside)."""
        if not isinstance(other, ModelRegistry):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        entries = tuple(sorted(self.configured.items()))
        return (entries, self.unknown, self.unknown_estimate, self.builtins)

    @property
    def configured(self) -> dict[str, ModelInfo]:
        """The configured entries, by name or glob."""
        return {**self._exact, **dict(self._globs)}

    # -- resolving ---------------------------------------------------------------------

    def resolve(self, name: str, *, estimate: bool = False) -> ModelInfo:
        """The entry for ``name`` (see the module docstring for the order).

        ``estimate=True`` estimates a name nothing matches even if the
        registry refuses unknown names (the ``--estimate`` of the CLI).
        """
        found = self.find(name)
        if found is not None:
            return found
        if self.unknown == "estimate" or estimate:
            return self.unknown_entry(name)
        raise UnknownModelError(self._unknown_message(name))

    def unknown_entry(self, name: str = "anything else") -> ModelInfo:
        """The entry a name nothing matches gets when unknown names are estimated."""
        return ModelInfo(
            name, None, 128_000, 4_096, estimate=self.unknown_estimate,
            per_message=4, reply_priming=4, source=_DEFAULT_SOURCE,
        )  # fmt: skip

    def find(self, name: str) -> ModelInfo | None:
        """The entry ``name`` matches, or None (the default for unknown names is not applied).

        Answers are remembered (up to ``_REMEMBERED`` names): globs are matched once a name.
        """
        found = self._found.get(name, _MISSING)
        if found is _MISSING:
            found = self._match(name)
            if len(self._found) >= _REMEMBERED:
                self._found.clear()
            self._found[name] = found
        return found  # type: ignore[return-value]

    def _match(self, name: str) -> ModelInfo | None:
        """Configured entries for every spelling of ``name`` (the whole name first: an entry
        can name a gateway's spelling), then the built-ins (the model behind the prefixes
        first: a provider's name never changes what a built-in name means)."""
        names = spellings(name)
        for spelling in names:
            if (found := self._configured_match(spelling)) is not None:
                return found
        if not self.builtins:
            return None
        for spelling in reversed(names):
            if (found := self._builtin_match(spelling.lower())) is not None:
                return found
        return None

    def _configured_match(self, name: str) -> ModelInfo | None:
        if name in self._exact:
            return self._exact[name]
        lowered = name.lower()
        for pattern, info in self._globs:
            if fnmatch.fnmatchcase(lowered, pattern.lower()):
                return info
        return None

    def _builtin_match(self, lowered: str) -> ModelInfo | None:
        family = _openai_family(lowered)
        if family is not None:
            return MODELS[family]
        for pattern, info in self._families:
            if fnmatch.fnmatchcase(lowered, pattern):
                return info
        return None

    def matches(self, pattern: str) -> bool:
        """Whether ``pattern`` (a name or glob, as in ``budgets``) names any model here.

        A glob names a model if it is a configured entry's glob, or matches
        a known name or an example name of an entry's glob (``*claude-sonnet-4*``
        gives ``claude-sonnet-4``).
        """
        if not is_glob(pattern):
            return self.find(pattern) is not None
        lowered = pattern.lower()
        globs = [p for p, _ in self._globs] + [p for p, _ in self._families]
        if lowered in (g.lower() for g in globs):
            return True
        names = [*self._exact, *(MODELS if self.builtins else ()), *ALIASES]
        names += [_example(g) for g in globs]
        return any(fnmatch.fnmatchcase(n.lower(), lowered) for n in names)

    def known(self) -> list[str]:
        """Every name and glob this registry resolves (configured first)."""
        configured = [*self._exact, *(p for p, _ in self._globs)]
        builtin = sorted([*MODELS, *ALIASES, *FAMILIES]) if self.builtins else []
        return configured + builtin

    # -- counters ----------------------------------------------------------------------

    def tokenizer(self, name: str, *, estimate: bool = False) -> ChatTokenizer:
        """The ``ChatTokenizer`` of ``name``'s entry (made once per entry, then shared)."""
        return self.tokenizer_of(self.resolve(name, estimate=estimate))

    def check(self) -> None:
        """Make every configured entry's counter now: a bad tokenizer file fails here."""
        for name, info in self.configured.items():
            try:
                self.tokenizer_of(info)
            except (CtxWindowError, ImportError, OSError) as exc:
                at = "" if info.source == "configured" else f"{info.source}: "
                raise ModelConfigError(f"{at}models[{name!r}].{info.counter}: {exc}") from None

    def tokenizer_of(self, info: ModelInfo) -> ChatTokenizer:
        """The shared ``ChatTokenizer`` of an entry already resolved (one for every unknown
        name estimated)."""
        key = _DEFAULT_KEY if info.source == _DEFAULT_SOURCE else info.name
        chat = self._tokenizers.get(key)
        if chat is None:
            with self._lock:
                chat = self._tokenizers.get(key) or make_tokenizer(info)
                self._tokenizers[key] = chat
        return chat

    def _unknown_message(self, name: str) -> str:
        """One line under 200 characters (with the CLI's prefix): the name, a close known
        one, and the two ways out (``ctxwindow models`` and docs/models.md list the rest)."""
        import difflib

        known = [_example(k) if is_glob(k) else k for k in self.known()]
        known = [k for k in known if not k.endswith(("-", ":"))]  # "claude-" is no model's name
        bare = (spellings(name) or [name])[-1]  # "" and "/" have no spelling
        close = difflib.get_close_matches(bare.lower(), known, n=1) if bare else []
        hint = f" (did you mean {close[0]}?)" if close else ""
        fix = (
            ": configure it (--model-config FILE, CTXWINDOW_MODEL_CONFIG)"
            " or estimate it (--estimate, CTXWINDOW_UNKNOWN_MODELS=estimate)"
        )
        message = f"unknown model {name!r}{hint}{fix}"
        if len(message) > _MESSAGE_MAX:
            message = f"unknown model {name!r}{fix}"
        cut = _MESSAGE_MAX - len(fix)
        while len(message) > _MESSAGE_MAX:  # a very long name: its start is enough to know it
            cut -= 1
            message = f"unknown model {name[:cut] + '…'!r}{fix}"
        return message

    # -- from configuration ------------------------------------------------------------

    @classmethod
    def from_config(
        cls,
        data: Mapping[str, Any],
        *,
        base: Path | None = None,
        where: str | None = None,
        unknown: Unknown | None = None,
    ) -> ModelRegistry:
        """A registry from ``{"unknown": ..., "unknown_estimate": ..., "models": {...}}``.

        Relative tokenizer paths are read from ``base`` (the config file's
        folder). ``unknown`` (if given) overrides the file's. Raises
        ``ModelConfigError`` naming ``where``, the entry and the field.
        """
        at = f"{where}: " if where else ""
        if not isinstance(data, Mapping):
            raise ModelConfigError(f"{at}expected a table of settings")
        extra = set(data) - {"unknown", "unknown_estimate", "models"}
        if extra:
            raise ModelConfigError(
                f"{at}unknown key {sorted(extra)[0]!r}; expected unknown, unknown_estimate, models"
            )
        chosen = unknown or data.get("unknown", "refuse")
        if chosen not in UNKNOWN:
            raise ModelConfigError(
                f"{at}unknown must be one of {', '.join(UNKNOWN)}, got {chosen!r}"
            )
        fallback = UNKNOWN_ESTIMATE
        if "unknown_estimate" in data:
            fallback = _estimate(data["unknown_estimate"], f"{at}unknown_estimate")
        models = data.get("models", {})
        if not isinstance(models, Mapping):
            raise ModelConfigError(f"{at}models must be a table of model entries")
        entries = {
            str(pattern): parse_entry(pattern, raw, base=base, where=where)
            for pattern, raw in models.items()
        }
        registry = cls(entries, unknown=chosen, unknown_estimate=fallback)
        registry.check()
        return registry

    def with_entries(
        self, entries: Mapping[str, Any], *, where: str | None = None, base: Path | None = None
    ) -> ModelRegistry:
        """This registry with more entries (raw, as in a config's ``models``) over its own;
        errors name ``where`` (an environment variable, a file) and the entry."""
        if not entries:
            return self
        parsed = {
            str(pattern): parse_entry(pattern, raw, base=base, where=where)
            for pattern, raw in entries.items()
        }
        registry = ModelRegistry(
            {**self.configured, **parsed},
            unknown=self.unknown, unknown_estimate=self.unknown_estimate, builtins=self.builtins,
        )  # fmt: skip
        # The counters already made stay (a tokenizer file is loaded once), but not replaced ones.
        registry._tokenizers = {k: v for k, v in self._tokenizers.items() if k not in parsed}
        registry.check()
        return registry

    @classmethod
    def from_file(cls, path: str | Path, *, unknown: Unknown | None = None) -> ModelRegistry:
        """A registry from a TOML (``.toml``) or JSON file; errors name the file."""
        path = Path(path).expanduser()
        data = read_config_file(path)
        return cls.from_config(data, base=path.resolve().parent, where=str(path), unknown=unknown)


def read_config_file(path: Path) -> dict[str, Any]:
    """A TOML or JSON file's table; ``ModelConfigError`` naming the file otherwise."""
    return read_table(path, "model config", ModelConfigError)


def parse_entry(
    pattern: Any, raw: Any, *, base: Path | None = None, where: str | None = None
) -> ModelInfo:
    """One entry of a model config, checked field by field."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ModelConfigError(f"{where or 'models'}: an entry needs a non-empty name or glob")
    at = f"{where}: models[{pattern!r}]" if where else f"models[{pattern!r}]"
    if not isinstance(raw, Mapping):
        raise ModelConfigError(f"{at}: expected a table of fields, got {type(raw).__name__}")
    extra = [k for k in raw if k not in _FIELDS]
    if extra:
        raise ModelConfigError(f"{at}: unknown field {extra[0]!r}; fields: {', '.join(_FIELDS)}")
    counters = [k for k in _COUNTERS if k in raw]
    if len(counters) > 1:
        raise ModelConfigError(f"{at}: give one counter, not {' and '.join(counters)}")
    inherited = None if is_glob(pattern) else ModelRegistry().find(pattern)
    if not counters and inherited is None:
        raise ModelConfigError(
            f'{at}: needs a counter: encoding = "o200k_base", tokenizer ='
            ' "path/to/tokenizer.json" or estimate = true'
        )
    if "context_window" not in raw and inherited is None:
        raise ModelConfigError(f"{at}.context_window: required (the model's window in tokens)")
    base_info = inherited or ModelInfo(pattern, None, 1, 1)
    window = _count(raw, "context_window", at, base_info.context_window)
    default_output = base_info.max_output if inherited else window
    output = _count(raw, "max_output", at, min(default_output, window))
    if output > window:
        raise ModelConfigError(f"{at}.max_output: {output} is more than context_window {window}")
    changes: dict[str, Any] = {
        "name": pattern, "context_window": window, "max_output": output,
        "input_price": _price(raw, "input_price", at, base_info.input_price),
        "output_price": _price(raw, "output_price", at, base_info.output_price),
        "cached_input_price": _cache_price(raw, "cached_input_price", at, base_info),
        "cache_write_price": _cache_price(raw, "cache_write_price", at, base_info),
        "strict_roles": _strict(raw, at, base_info.strict_roles),
        "source": where or "configured",
    }  # fmt: skip
    if "encoding" in raw:
        changes.update(encoding=_encoding(raw["encoding"], at), tokenizer=None, estimate=None)
    elif "tokenizer" in raw:
        changes.update(tokenizer=_tokenizer_path(raw["tokenizer"], at, base), estimate=None)
    elif "estimate" in raw:
        default = base_info.estimate or UNKNOWN_ESTIMATE
        changes.update(
            tokenizer=None, estimate=_estimate(raw["estimate"], f"{at}.estimate", default)
        )
        if inherited is None or inherited.estimate is None:
            changes.update(per_message=4, reply_priming=4)
    return replace(base_info, **changes)


def _count(raw: Mapping[str, Any], key: str, at: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelConfigError(f"{at}.{key}: must be a positive whole number, got {value!r}")
    return value


def _cache_price(raw: Mapping[str, Any], key: str, at: str, base: ModelInfo) -> float | None:
    """A configured cache price, or the inherited one (None: the cache is not priced)."""
    inherited: float | None = getattr(base, key)
    if key not in raw:
        return inherited
    return _price(raw, key, at, 0.0)


def _price(raw: Mapping[str, Any], key: str, at: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ModelConfigError(f"{at}.{key}: must be dollars per 1M tokens >= 0, got {value!r}")
    return float(value)


def _strict(raw: Mapping[str, Any], at: str, default: StrictRoles | None) -> StrictRoles | None:
    value = raw.get("strict_roles", default)
    if value in (None, False, "off"):
        return None
    if value not in STRICT:
        raise ModelConfigError(
            f'{at}.strict_roles: must be "merge", "bridge" or "off", got {value!r}'
        )
    return value  # type: ignore[no-any-return]


def _encoding(value: Any, at: str) -> str:
    if value not in SPECS:
        raise ModelConfigError(
            f"{at}.encoding: unknown encoding {value!r}; known: {', '.join(sorted(SPECS))}"
        )
    return str(value)


def _tokenizer_path(value: Any, at: str, base: Path | None) -> str:
    if not isinstance(value, str) or not value:
        raise ModelConfigError(f"{at}.tokenizer: must be the path of a tokenizer.json or folder")
    path = Path(value).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    path = path.resolve()
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise ModelConfigError(f"{at}.tokenizer: no tokenizer.json in the folder {path}")
    elif not path.is_file():
        raise ModelConfigError(f"{at}.tokenizer: no such file: {path}")
    return str(path)


def _estimate(value: Any, at: str, default: Estimate = UNKNOWN_ESTIMATE) -> Estimate:
    """``true`` (the default fit), a margin, or a table of the three parameters."""
    if value is True:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"margin": value}
    if not isinstance(value, Mapping):
        raise ModelConfigError(
            f"{at}: true, a margin (>= 1) or a table of margin, chars_per_token,"
            f" tokens_per_wide; got {value!r}"
        )
    extra = set(value) - {"margin", "chars_per_token", "tokens_per_wide"}
    if extra:
        raise ModelConfigError(f"{at}: unknown field {sorted(extra)[0]!r}")
    fields: dict[str, float] = {}
    for key in ("margin", "chars_per_token", "tokens_per_wide"):
        number = value.get(key, getattr(default, key))
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not number > 0:
            raise ModelConfigError(f"{at}.{key}: must be a positive number, got {number!r}")
        fields[key] = float(number)
    if fields["margin"] < 1:
        raise ModelConfigError(f"{at}.margin: must be >= 1 (a safety margin), got {value!r}")
    return Estimate(**fields)


def _longest_first(entries: Mapping[str, ModelInfo]) -> list[tuple[str, ModelInfo]]:
    """Globs, the most specific (most literal characters) first."""
    return sorted(entries.items(), key=lambda kv: -sum(c not in _GLOB for c in kv[0]))


def _example(glob: str) -> str:
    """A name ``glob`` matches: wildcards dropped, a character class's first character kept."""
    return re.sub(r"\[!?(.)[^\]]*\]", r"\1", glob).replace("*", "").replace("?", "x")


def _openai_family(name: str) -> str | None:
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


def make_tokenizer(info: ModelInfo) -> ChatTokenizer:
    """The ``ChatTokenizer`` an entry asks for."""
    framing = ChatFraming(
        per_message=info.per_message, per_name=info.per_name,
        reply_priming=info.reply_priming, tools=info.tools, images=info.images,
    )  # fmt: skip
    if info.tokenizer is not None:
        from ctxwindow.tokens.hf import hf_chat_tokenizer

        return hf_chat_tokenizer(info.tokenizer, name=info.name)
    if info.estimate is not None:
        e = info.estimate
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # estimated counts are flagged where they are used
            counter = EstimateCounter(e.margin, e.chars_per_token, e.tokens_per_wide)
        return ChatTokenizer(counter, framing, model=info.name)
    assert info.encoding is not None
    return ChatTokenizer(_shared_counter(info.encoding), framing, model=info.name)


@functools.lru_cache(maxsize=8)
def _shared_counter(encoding: str) -> CachedCounter:
    """One counter (and count cache) per encoding, whichever entries use it."""
    return CachedCounter(TiktokenCounter(encoding))


def __getattr__(name: str) -> Any:
    """``default_models``, ``models_from_env`` and ``use_models`` live in
    :mod:`ctxwindow.tokens.defaults`, above this module; importing them from here still
    works."""
    if name in _MOVED:
        from ctxwindow.tokens import defaults  # only for the old import path

        return getattr(defaults, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ModelRegistry",
    "default_models",
    "is_glob",
    "make_tokenizer",
    "models_from_env",
    "parse_entry",
    "read_config_file",
    "spellings",
    "use_models",
]
