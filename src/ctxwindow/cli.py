"""The ``ctxwindow`` command line (docs/cli.md).

Every command prints its result on stdout; bad input is one line on stderr
starting with ``ctxwindow: error:`` and exit status 2, never a traceback. So are
usage errors (an unknown option or command, a missing or bad value): see
``cli_usage``.
"""

from __future__ import annotations

import warnings
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxwindow.cli_count import InputError as InputError
from ctxwindow.cli_count import count
from ctxwindow.cli_eval import EvalCommand, eval_command
from ctxwindow.cli_models import models as models_command
from ctxwindow.cli_options import EstimateOption, ModelConfigOption
from ctxwindow.cli_output import fail, fail_as_given
from ctxwindow.cli_sessions import app as sessions_app
from ctxwindow.cli_usage import Commands
from ctxwindow.extras import install_hint

app = typer.Typer(
    name="ctxwindow",
    cls=Commands,
    help="Keep LLM conversations inside their token budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        try:
            version = metadata.version("ctxwindow")
        except metadata.PackageNotFoundError:  # run from a source tree never installed
            version = "(not installed)"
        typer.echo(f"ctxwindow {version}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Keep LLM conversations inside their token budget."""


# The options of ``ctxwindow serve``, named so the command reads as a list of them.
HostOption = Annotated[
    str | None, typer.Option(metavar="HOST", help="Address to bind (default 127.0.0.1).")
]
PortOption = Annotated[int | None, typer.Option(metavar="PORT", help="Port (default 8000).")]
StoreURLOption = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="Store URL: sqlite:///PATH, redis://..., postgresql://... or memory://"
        " (default: sessions.db in the data folder).",
    ),
]
UpstreamOption = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="OpenAI-compatible base URL to forward to (default https://api.openai.com/v1).",
    ),
]
SettingsOption = Annotated[
    Path | None, typer.Option(metavar="FILE", help="Settings file (JSON or TOML).")
]
ServeWorkersOption = Annotated[
    int | None, typer.Option(metavar="N", help="Worker processes sharing the store (default 1).")
]


def serve(
    host: HostOption = None,
    port: PortOption = None,
    store: StoreURLOption = None,
    upstream: UpstreamOption = None,
    config: SettingsOption = None,
    workers: ServeWorkersOption = None,
    estimate: EstimateOption = False,
    model_config: ModelConfigOption = None,
) -> None:
    """Run the OpenAI-compatible context service (docs/server.md).

    Every option can also come from CTXWINDOW_* environment variables; the
    upstream API key only from the environment.
    """
    from ctxwindow.extras import require

    try:
        require("server", "ctxwindow serve")
        from ctxwindow.server.main import STARTUP_ERRORS, serve_command
    except ImportError as exc:  # a package of the extra, or one of theirs, is missing
        hint = "" if "pip install" in str(exc) else f" ({install_hint('server')})"
        fail_as_given(f"{exc}{hint}")
    try:
        serve_command(
            host, port, store, upstream, config, workers,
            models_file=model_config, unknown_models="estimate" if estimate else None,
        )  # fmt: skip
    except STARTUP_ERRORS as exc:
        fail(str(exc))


app.command()(count)
app.command("eval", cls=EvalCommand)(eval_command)
app.command()(serve)
app.command("models")(models_command)
app.add_typer(sessions_app, name="sessions")


def main() -> None:
    """Entry point of the ``ctxwindow`` script."""
    warnings.simplefilter("default")
    warnings.formatwarning = _format_warning
    app()


def _format_warning(message: Warning | str, *_: Any, **__: Any) -> str:
    return f"ctxwindow: warning: {message}\n"


if __name__ == "__main__":
    main()
