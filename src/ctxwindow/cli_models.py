"""``ctxwindow models``: the model names ctxwindow knows and how each is counted (docs/cli.md).

Every entry of the model registry, configured ones (``--model-config``,
``CTXWINDOW_MODEL_CONFIG``, ``CTXWINDOW_MODELS``) first: its name or glob, its
counter (a tiktoken encoding or a ``tokenizer.json``: exact; an estimate: its
family and margin), window, maximum output, prices and where it comes from;
then OpenAI's aliases and naming rules, and what a name nothing matches gets.
With NAMEs, the entry each name resolves to. On a terminal the output is a
rich table; piped, tab-separated lines; ``--json`` is for programs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxwindow.cli_sessions import echo_json, fail, print_table
from ctxwindow.errors import CtxWindowError
from ctxwindow.tokens.defaults import models_from_env
from ctxwindow.tokens.models import (
    ALIASES,
    ESTIMATES,
    FAMILIES,
    MODELS,
    OPENAI_PREFIXES,
    ModelInfo,
)
from ctxwindow.tokens.registry import UNKNOWN_ESTIMATE, ModelRegistry, is_glob

HEADER = ["model", "counted by", "window", "max output", "$ in / out per 1M", "source"]


def models(
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="[NAME]...", help="Show the entry each of these names resolves to."),
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option(
            "--model-config",
            metavar="FILE",
            help="TOML or JSON file of model entries; default: $CTXWINDOW_MODEL_CONFIG.",
        ),
    ] = None,
    estimate: Annotated[
        bool, typer.Option("--estimate", help="Names no entry matches are estimated, not refused.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the models ctxwindow knows and how each is counted.

    Configured entries come first, then the built-in ones: OpenAI's (exact),
    their aliases and naming rules, the other families' globs (estimated)
    and what any other name gets. With NAMEs, the entry each resolves to;
    an unknown name fails with exit status 2.
    """
    try:
        registry = _registry(model_config, estimate)
        rows = [_resolved(registry, n) for n in names] if names else _every_entry(registry)
    except CtxWindowError as exc:
        fail(str(exc))
    if as_json:
        echo_json(rows)
        return
    header = ["name", *HEADER] if names else HEADER
    cells = [[row["name"], *_cells(row)] if names else _cells(row) for row in rows]
    print_table(header, cells, "no models")


def _registry(config: Path | None, estimate: bool) -> ModelRegistry:
    """The registry ``count`` would use with the same options (the environment untouched)."""
    env = dict(os.environ)
    if config is not None:
        env["CTXWINDOW_MODEL_CONFIG"] = str(config.expanduser().resolve())
    if estimate:
        env["CTXWINDOW_UNKNOWN_MODELS"] = "estimate"
    return models_from_env(env)


def _resolved(registry: ModelRegistry, name: str) -> dict[str, Any]:
    return {"name": name, **entry_row(registry.resolve(name))}


def _every_entry(registry: ModelRegistry) -> list[dict[str, Any]]:
    rows = [entry_row(info) for info in registry.configured.values()]
    if registry.builtins:
        rows += [entry_row(info) for info in MODELS.values()]
        rows += _pointers(ALIASES, "alias")
        rows += _pointers({f"{p}*": m for p, m in OPENAI_PREFIXES.items()}, "rule")
        rows += [entry_row(info) for info in FAMILIES.values()]
    rows.append(_default_row(registry))
    return rows


def _pointers(names: Mapping[str, str], kind: str) -> list[dict[str, Any]]:
    """Rows of names that count as a built-in model (``chatgpt-4o-latest`` as ``gpt-4o``)."""
    return [
        {**entry_row(MODELS[target]), "entry": name, "kind": kind, "as": target}
        for name, target in names.items()
    ]


def entry_row(info: ModelInfo) -> dict[str, Any]:
    """One entry as the JSON output gives it."""
    row: dict[str, Any] = {
        "entry": info.name,
        "kind": "glob" if is_glob(info.name) else "model",
        "counter": info.counter,
        "exact": not info.estimated,
        "context_window": info.context_window,
        "max_output": info.max_output,
        "input_price": info.input_price,
        "output_price": info.output_price,
        "source": info.source,
    }
    if info.tokenizer is not None:
        row["tokenizer"] = info.tokenizer
    elif info.estimate is not None:
        e = info.estimate
        row["estimate"] = {
            "family": estimate_name(info), "margin": e.margin,
            "chars_per_token": e.chars_per_token, "tokens_per_wide": e.tokens_per_wide,
        }  # fmt: skip
    else:
        row["encoding"] = info.encoding
    return row


def estimate_name(info: ModelInfo) -> str:
    """The name docs/models.md gives an entry's estimate, or ``custom``."""
    names = {**{e: n for n, e in ESTIMATES.items()}, UNKNOWN_ESTIMATE: "fallback"}
    return "custom" if info.estimate is None else names.get(info.estimate, "custom")


def _default_row(registry: ModelRegistry) -> dict[str, Any]:
    if registry.unknown == "refuse":
        return {"entry": "anything else", "kind": "default", "counter": "refused",
                "exact": False, "source": "default"}  # fmt: skip
    return {**entry_row(registry.unknown_entry()), "entry": "anything else", "kind": "default"}


def _cells(row: dict[str, Any]) -> list[str]:
    if row["counter"] == "refused":
        how = "refused: configure it (--model-config) or --estimate"
        return [row["entry"], how, "", "", "", row["source"]]
    return [
        row["entry"],
        _counted_by(row),
        f"{row['context_window']:,}",
        f"{row['max_output']:,}",
        _prices(row["input_price"], row["output_price"]),
        row["source"],
    ]


def _counted_by(row: dict[str, Any]) -> str:
    if "tokenizer" in row:
        how = f"tokenizer {row['tokenizer']} (exact)"
    elif "estimate" in row:
        e = row["estimate"]
        how = f"estimate: {e['family']} ×{e['margin']:.2f}"
    else:
        how = f"{row['encoding']} (exact)"
    return f"{how}, as {row['as']}" if "as" in row else how


def _prices(given: float, out: float) -> str:
    return "—" if given == out == 0 else f"{given:g} / {out:g}"
