"""One model entry of a config, checked field by field: what ``ModelRegistry`` is built from.

An entry names a model (or a glob of models) and gives its window, limits,
prices, role rules and one counter: a tiktoken ``encoding``, a Hugging Face
``tokenizer`` file, or an ``estimate``. A name the built-in catalogue knows
inherits what the entry leaves out; any other needs a counter and a
``context_window``. Every problem is one ``ModelConfigError`` naming the
entry and the field (``models['qwen2.5:*'].context_window: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxwindow.errors import ModelConfigError
from ctxwindow.tokens.encodings import SPECS
from ctxwindow.tokens.models import Estimate, ModelInfo, StrictRoles
from ctxwindow.tokens.names import builtin_entry, is_glob

STRICT: tuple[StrictRoles, ...] = ("merge", "bridge")
UNKNOWN_ESTIMATE = Estimate(margin=1.20, chars_per_token=3.03, tokens_per_wide=1.13)
"""The estimator for names nothing matches: fitted on the measured families' samples pooled
(docs/models.md)."""

_FIELDS = (
    "context_window", "max_output", "encoding", "tokenizer", "estimate",
    "input_price", "output_price", "cached_input_price", "cache_write_price", "strict_roles",
)  # fmt: skip
_COUNTERS = ("encoding", "tokenizer", "estimate")


def parse_entry(
    pattern: Any, raw: Any, *, base: Path | None = None, where: str | None = None
) -> ModelInfo:
    """One entry of a model config, checked field by field.

    Relative tokenizer paths are read from ``base``; errors name ``where``
    (a file, an environment variable) and the entry.
    """
    at = _entry_at(pattern, raw, where)
    counters = [k for k in _COUNTERS if k in raw]
    if len(counters) > 1:
        raise ModelConfigError(f"{at}: give one counter, not {' and '.join(counters)}")
    inherited = None if is_glob(pattern) else builtin_entry(pattern)
    if not counters and inherited is None:
        raise ModelConfigError(
            f'{at}: needs a counter: encoding = "o200k_base", tokenizer ='
            ' "path/to/tokenizer.json" or estimate = true'
        )
    if "context_window" not in raw and inherited is None:
        raise ModelConfigError(f"{at}.context_window: required (the model's window in tokens)")
    base_info = inherited or ModelInfo(pattern, None, 1, 1)
    changes: dict[str, Any] = {
        "name": pattern, **_limits_and_prices(raw, at, base_info, inherited is not None),
        "source": where or "configured",
    }  # fmt: skip
    changes.update(_counter(raw, at, base, base_info, inherited))
    return replace(base_info, **changes)


def _entry_at(pattern: Any, raw: Any, where: str | None) -> str:
    """Where the entry is, for its errors, once its name and its fields are checked."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ModelConfigError(f"{where or 'models'}: an entry needs a non-empty name or glob")
    at = f"{where}: models[{pattern!r}]" if where else f"models[{pattern!r}]"
    if not isinstance(raw, Mapping):
        raise ModelConfigError(f"{at}: expected a table of fields, got {type(raw).__name__}")
    extra = [k for k in raw if k not in _FIELDS]
    if extra:
        raise ModelConfigError(f"{at}: unknown field {extra[0]!r}; fields: {', '.join(_FIELDS)}")
    return at


def _limits_and_prices(
    raw: Mapping[str, Any], at: str, base_info: ModelInfo, inherited: bool
) -> dict[str, Any]:
    """The window, the reply's limit, the prices and the role rules, over ``base_info``'s."""
    window = _count(raw, "context_window", at, base_info.context_window)
    default_output = base_info.max_output if inherited else window
    output = _count(raw, "max_output", at, min(default_output, window))
    if output > window:
        raise ModelConfigError(f"{at}.max_output: {output} is more than context_window {window}")
    return {
        "context_window": window, "max_output": output,
        "input_price": _price(raw, "input_price", at, base_info.input_price),
        "output_price": _price(raw, "output_price", at, base_info.output_price),
        "cached_input_price": _cache_price(raw, "cached_input_price", at, base_info),
        "cache_write_price": _cache_price(raw, "cache_write_price", at, base_info),
        "strict_roles": _strict(raw, at, base_info.strict_roles),
    }  # fmt: skip


def _counter(
    raw: Mapping[str, Any],
    at: str,
    base: Path | None,
    base_info: ModelInfo,
    inherited: ModelInfo | None,
) -> dict[str, Any]:
    """The entry's counter, in place of ``base_info``'s (nothing if it gives none)."""
    if "encoding" in raw:
        return {"encoding": _encoding(raw["encoding"], at), "tokenizer": None, "estimate": None}
    if "tokenizer" in raw:
        return {"tokenizer": _tokenizer_path(raw["tokenizer"], at, base), "estimate": None}
    if "estimate" not in raw:
        return {}
    default = base_info.estimate or UNKNOWN_ESTIMATE
    changes: dict[str, Any] = {
        "tokenizer": None, "estimate": parse_estimate(raw["estimate"], f"{at}.estimate", default)
    }  # fmt: skip
    if inherited is None or inherited.estimate is None:
        changes.update(per_message=4, reply_priming=4)
    return changes


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


def parse_estimate(value: Any, at: str, default: Estimate = UNKNOWN_ESTIMATE) -> Estimate:
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
