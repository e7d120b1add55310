"""The process's model registry and the shortcuts that use it.

Wherever a model is named without a registry (``count_tokens``,
``chat_tokenizer``, ``model_info``, the windows), the process's registry
answers: the built-ins plus the file named by ``CTXWINDOW_MODEL_CONFIG``, the
entries of ``CTXWINDOW_MODELS`` and ``CTXWINDOW_UNKNOWN_MODELS`` (``refuse``
or ``estimate``), read on first use; ``use_models`` replaces it.

This module sits above the registry (:mod:`ctxwindow.tokens.registry`), the
chat framing (:mod:`ctxwindow.tokens.chat`) and the catalogue
(:mod:`ctxwindow.tokens.models`), so that none of them reaches up for the
process's state. Their old import paths of these names still work.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxwindow.errors import ModelConfigError
from ctxwindow.messages import validate_message
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.counter import EstimateWarning
from ctxwindow.tokens.models import ModelInfo
from ctxwindow.tokens.registry import UNKNOWN, ModelRegistry, read_config_file

_default: ModelRegistry | None = None
_default_lock = threading.Lock()


def default_models() -> ModelRegistry:
    """The process's registry: the built-ins, ``CTXWINDOW_MODEL_CONFIG`` and
    ``CTXWINDOW_UNKNOWN_MODELS``, read on first use (or what ``use_models`` set)."""
    global _default
    registry = _default
    if registry is None:
        with _default_lock:
            if _default is None:
                _default = models_from_env()
            registry = _default
    return registry


def models_from_env(environ: Mapping[str, str] | None = None) -> ModelRegistry:
    """A registry from ``CTXWINDOW_MODEL_CONFIG`` (a file), ``CTXWINDOW_MODELS`` (JSON of
    entries) and ``CTXWINDOW_UNKNOWN_MODELS``."""
    env = os.environ if environ is None else environ
    unknown = env.get("CTXWINDOW_UNKNOWN_MODELS") or None
    if unknown is not None and unknown not in UNKNOWN:
        raise ModelConfigError(
            f"CTXWINDOW_UNKNOWN_MODELS: must be one of {', '.join(UNKNOWN)}, got {unknown!r}"
        )
    data: dict[str, Any] = {}
    base = None
    where = None
    file = env.get("CTXWINDOW_MODEL_CONFIG")
    if file:
        path = Path(file).expanduser()
        data = read_config_file(path)
        base, where = path.resolve().parent, str(path)
    entries = _inline_entries(env)
    registry = ModelRegistry.from_config(data, base=base, where=where, unknown=unknown)
    return registry.with_entries(entries, where="CTXWINDOW_MODELS")


def _inline_entries(env: Mapping[str, str]) -> Any:
    """The entries of ``CTXWINDOW_MODELS`` (a JSON object), or none."""
    inline = env.get("CTXWINDOW_MODELS")
    if not inline:
        return {}
    try:
        entries = json.loads(inline)
    except ValueError as exc:
        raise ModelConfigError(f"CTXWINDOW_MODELS: not valid JSON: {exc}") from None
    if not isinstance(entries, dict):
        raise ModelConfigError("CTXWINDOW_MODELS: a JSON object of model entries")
    return entries


def use_models(models: ModelRegistry | str | Path | None) -> ModelRegistry:
    """Make ``models`` (a registry, or a config file) the process's registry; None goes
    back to the environment's. Returns the registry now in use."""
    global _default
    if isinstance(models, (str, Path)):
        models = ModelRegistry.from_file(models)
    with _default_lock:
        _default = models
    return default_models()


def chat_tokenizer(model: str = "gpt-4o", *, estimate: bool = False) -> ChatTokenizer:
    """The ``ChatTokenizer`` for a model name (shared per process), from the process's
    model registry (built-ins and configured entries, see ``ctxwindow.tokens.registry``).

    ``estimate=True`` allows the estimator for a name nothing matches. An
    estimated model warns once per name, because its counts are not billed counts.
    """
    models = default_models()
    info = models.resolve(model, estimate=estimate)
    if info.estimated:
        _warn_estimated(model, info.estimate.margin if info.estimate else 1.0)
    return models.tokenizer_of(info)


@functools.lru_cache(maxsize=256)
def _warn_estimated(model: str, margin: float) -> None:
    warnings.warn(
        f"model {model!r} has no exact tokenizer here: token counts are estimated"
        f" (x{margin} margin)",
        EstimateWarning,
        stacklevel=3,
    )


def count_tokens(
    messages: Sequence[Mapping[str, Any]],
    model: str = "gpt-4o",
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    estimate: bool = False,
) -> int:
    """Prompt tokens the provider bills for ``messages`` (and ``tools``) on ``model``.

    >>> count_tokens([{"role": "user", "content": "Hello!"}])
    9

    Raises ``InvalidMessageError`` for a message that is not chat wire format
    and ``UnknownModelError`` for a model the registry does not know (unless
    ``estimate=True``).
    """
    for i, message in enumerate(messages):
        validate_message(message, where=f"messages[{i}]")
    return chat_tokenizer(model, estimate=estimate).count(messages, tools)


def model_info(name: str) -> ModelInfo:
    """Resolve a model name through the process's registry (``default_models()``).

    Built-in names resolve exactly, by alias or by dated snapshot, by OpenAI's
    naming rules, then by the longest glob of another family; configured
    entries come first; a provider prefix (``openai/gpt-4o``) names the model
    behind it. An unknown name raises ``UnknownModelError`` (one line saying
    how to configure it), unless the registry estimates unknown models.
    """
    return default_models().resolve(name)


def known_models() -> list[str]:
    """Every name and glob the process's registry resolves."""
    return default_models().known()


__all__ = [
    "chat_tokenizer",
    "count_tokens",
    "default_models",
    "known_models",
    "model_info",
    "models_from_env",
    "use_models",
]
