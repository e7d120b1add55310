"""The options every ``ctxwindow`` command takes about models (docs/models.md).

``--model-config FILE`` adds model entries beyond the built-in ones and
``--estimate`` counts a model that no entry matches with the estimator;
``use_model_options`` makes them the process's (and its forked workers').
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ctxwindow.cli_output import fail_as_given
from ctxwindow.errors import CtxWindowError

ModelConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--model-config",
        metavar="FILE",
        help="TOML or JSON file of model entries (window, limits, counter); "
        "default: $CTXWINDOW_MODEL_CONFIG.",
    ),
]
EstimateOption = Annotated[
    bool,
    typer.Option(
        "--estimate",
        help="Count a model that no entry matches with the estimator instead of refusing it.",
    ),
]


def use_model_options(config: Path | None, estimate: bool) -> None:
    """Make the model config and ``--estimate`` the process's (and forked workers'); a config
    that cannot be used ends the command."""
    from ctxwindow.tokens.defaults import use_models

    if config is not None:
        os.environ["CTXWINDOW_MODEL_CONFIG"] = str(config.expanduser().resolve())
    if estimate:
        os.environ["CTXWINDOW_UNKNOWN_MODELS"] = "estimate"
    if config is not None or estimate:
        try:
            use_models(None)  # read again from the environment, checked now
        except CtxWindowError as exc:
            fail_as_given(str(exc))
