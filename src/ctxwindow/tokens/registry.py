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

Names are spelled and matched against the catalogue by
:mod:`ctxwindow.tokens.names`, and entries checked by
:mod:`ctxwindow.tokens.entries`. The process has one default registry, used
wherever a model is named without one (``chat_tokenizer``, ``model_info``,
the windows): ``default_models`` in :mod:`ctxwindow.tokens.defaults`, which
sits above this module.
"""

from __future__ import annotations

import fnmatch
import functools
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ctxwindow._moved import warn_moved
from ctxwindow.configfile import read_table
from ctxwindow.errors import CtxWindowError, ModelConfigError, UnknownModelError
from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer
from ctxwindow.tokens.counter import CachedCounter, EstimateCounter, TiktokenCounter
from ctxwindow.tokens.entries import STRICT as STRICT  # their former home
from ctxwindow.tokens.entries import UNKNOWN_ESTIMATE as UNKNOWN_ESTIMATE
from ctxwindow.tokens.entries import parse_entry as parse_entry
from ctxwindow.tokens.entries import parse_estimate
from ctxwindow.tokens.models import ALIASES, FAMILIES, MODELS, Estimate, ModelInfo
from ctxwindow.tokens.names import builtin_entry, example, longest_first
from ctxwindow.tokens.names import is_glob as is_glob
from ctxwindow.tokens.names import spellings as spellings

if TYPE_CHECKING:  # their old import path (see ``__getattr__``)
    from ctxwindow.tokens.defaults import default_models as default_models
    from ctxwindow.tokens.defaults import models_from_env as models_from_env
    from ctxwindow.tokens.defaults import use_models as use_models

Unknown = Literal["refuse", "estimate"]
UNKNOWN: tuple[Unknown, ...] = ("refuse", "estimate")
_DEFAULT_SOURCE = "default for unknown models"
_DEFAULT_KEY = "\0default"
_MISSING = object()
_REMEMBERED = 4096
_MESSAGE_MAX = 180  # an unknown name's error, so that "ctxwindow: error: " + it is < 200
# to ctxwindow.tokens.defaults; the public home each old import is pointed to
_MOVED = {
    "default_models": "ctxwindow.tokens",
    "models_from_env": "ctxwindow.tokens.defaults",  # internal: for the CLI and the service
    "use_models": "ctxwindow.tokens",
}


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
        self._globs = longest_first({k: v for k, v in configured.items() if is_glob(k)})
        self._families = longest_first(FAMILIES) if builtins else []
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
        return builtin_entry(name) if self.builtins else None

    def _configured_match(self, name: str) -> ModelInfo | None:
        if name in self._exact:
            return self._exact[name]
        lowered = name.lower()
        for pattern, info in self._globs:
            if fnmatch.fnmatchcase(lowered, pattern.lower()):
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
        names += [example(g) for g in globs]
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

        known = [example(k) if is_glob(k) else k for k in self.known()]
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
            fallback = parse_estimate(data["unknown_estimate"], f"{at}unknown_estimate")
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
        warn_moved(__name__, name, _MOVED[name])
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
