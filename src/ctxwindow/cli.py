"""The ``ctxwindow`` command line (docs/cli.md).

Every command prints its result on stdout; bad input is one line on stderr
starting with ``ctxwindow: error:`` and exit status 2, never a traceback. So are
usage errors (an unknown option or command, a missing or bad value): see
``cli_usage``.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import warnings
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import typer.core

from ctxwindow.cli_models import models as models_command
from ctxwindow.cli_sessions import app as sessions_app
from ctxwindow.cli_usage import Commands
from ctxwindow.errors import CtxWindowError
from ctxwindow.extras import install_hint
from ctxwindow.messages import validate_message
from ctxwindow.tokens import chat_tokenizer

app = typer.Typer(
    name="ctxwindow",
    cls=Commands,
    help="Keep LLM conversations inside their token budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class InputError(CtxWindowError):
    """The command's input cannot be used; the text says why."""


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


# How every command is told about models beyond the built-in ones (docs/models.md).
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


def _use_models(config: Path | None, estimate: bool) -> None:
    """Make the model config and ``--estimate`` the process's (and forked workers')."""
    from ctxwindow.tokens.defaults import use_models

    if config is not None:
        os.environ["CTXWINDOW_MODEL_CONFIG"] = str(config.expanduser().resolve())
    if estimate:
        os.environ["CTXWINDOW_UNKNOWN_MODELS"] = "estimate"
    if config is not None or estimate:
        use_models(None)  # read again from the environment, checked now


@app.command()
def count(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            help="JSON file of chat messages (an array, or a request body with"
            ' "messages"), or - for standard input.',
        ),
    ] = "-",
    model: Annotated[
        str,
        typer.Option(
            metavar="NAME", help="Model whose tokenizer and chat framing count the request."
        ),
    ] = "gpt-4o",
    tools: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="JSON file with the request's tool definitions."),
    ] = None,
    text: Annotated[
        bool, typer.Option("--text", help="The input is plain text: count it without chat framing.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print a JSON breakdown per message instead of the total."),
    ] = False,
    estimate: EstimateOption = False,
    model_config: ModelConfigOption = None,
) -> None:
    """Print the prompt tokens a request costs, as a bare integer.

    FILE holds a JSON array of chat messages, or a request body object with
    "messages" (and optionally "tools"). An estimated count is said on
    stderr (and as "exact": false with --json).
    """
    try:
        _use_models(model_config, estimate)
        _count(_read(file), _input_name(file), model, tools, text, as_json, estimate)
    except CtxWindowError as exc:
        _fail(str(exc))


def _count(
    raw: str,
    where: str,
    model: str,
    tools_file: Path | None,
    text: bool,
    as_json: bool,
    estimate: bool,
) -> None:
    tokenizer = chat_tokenizer(model, estimate=estimate)
    if text:
        n = tokenizer.text(raw)
        typer.echo(json.dumps({"model": model, "tokens": n}) if as_json else n)
        return
    messages, tools = _parse_request(raw, where)
    if tools_file is not None:
        tools = _parse_tools(_read(str(tools_file)), str(tools_file))
    if not as_json:
        typer.echo(tokenizer.count(messages, tools))
        return
    per_message = [
        {"index": i, "role": m["role"], "tokens": tokenizer.message_tokens(m)}
        for i, m in enumerate(messages)
    ]
    breakdown = {
        "model": model,
        "exact": tokenizer.exact,
        "total": tokenizer.count(messages, tools),
        "reply_priming": tokenizer.framing.reply_priming,
        "tools": tokenizer.tools_tokens(tools),
        "messages": per_message,
    }
    typer.echo(json.dumps(breakdown, ensure_ascii=False, indent=2))


def _parse_request(
    raw: str, where: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    data = _load_json(raw, where)
    tools = None
    if isinstance(data, dict) and "messages" in data:
        tools = _check_tools(data.get("tools"), f"{where}: 'tools'")
        data = data["messages"]
        where = f"{where}: 'messages'"
    if not isinstance(data, list):
        raise InputError(
            f"{where} must be a JSON array of chat messages (or an object with"
            f' "messages"), got {_json_kind(data)}'
        )
    for i, message in enumerate(data):
        validate_message(message, where=f"{where}: message {i}")
    return data, tools


def _parse_tools(raw: str, where: str) -> list[dict[str, Any]] | None:
    return _check_tools(_load_json(raw, where), where)


def _check_tools(tools: Any, where: str) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InputError(
            f"{where}: tools must be a JSON array of tool objects, got {_json_kind(tools)}"
        )
    for i, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InputError(
                f"{where}: tool {i} has no function name (expected"
                ' {"type": "function", "function": {"name": ..., "parameters": ...}})'
            )
    return tools


def _load_json(raw: str, where: str) -> Any:
    if not raw.strip():
        raise InputError(f"{where} is empty")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where} is not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None


def _json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return "null" if value is None else kinds.get(type(value), "a number")


def _input_name(file: str) -> str:
    return "standard input" if file == "-" else file


def _read(file: str) -> str:
    try:
        if file == "-":
            return sys.stdin.read()
        return Path(file).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{_input_name(file)} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InputError(f"cannot read {file}: {exc.strerror or exc}") from None


def _fail(message: str) -> NoReturn:
    typer.echo(f"ctxwindow: error: {message}", err=True)
    raise typer.Exit(2)


# The options of ``ctxwindow eval``, named so the command reads as a list of them.
DatasetOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="SPEC",
        help="A dataset: builtin:NAME, locomo:PATH, longmemeval:PATH, beam:PATH or a .json/.jsonl"
        " file (the forms are listed below); repeat for several. Default: builtin:all.",
    ),
]
StrategiesOption = Annotated[
    str,
    typer.Option(
        metavar="NAMES",
        show_default=False,
        help="Comma-separated strategy names (listed below). Default: message_window,"
        " token_window, hybrid, full.",
    ),
]
BudgetsOption = Annotated[
    str,
    typer.Option(
        metavar="N,N,...",
        show_default=False,
        help="Comma-separated token budgets. Default: 1024, 2048, 4096, 8192, 16384.",
    ),
]
EvalModelOption = Annotated[
    str,
    typer.Option(
        metavar="NAME", help="Model whose tokenizer counts the contexts and whose prices cost them."
    ),
]
OutOption = Annotated[
    Path,
    typer.Option(
        metavar="DIR", help="Folder for results.json, report.html and the charts (PNG files)."
    ),
]
SkipInvalidOption = Annotated[
    bool,
    typer.Option(
        "--skip-invalid",
        help="Leave out invalid conversations and questions (each is reported) instead of"
        " stopping.",
    ),
]
IncludeUnanswerableOption = Annotated[
    bool,
    typer.Option(
        "--include-unanswerable",
        help="locomo:/longmemeval: also measure questions with no answer in the conversation.",
    ),
]
LLMBaseURLOption = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="OpenAI-compatible endpoint whose model answers the questions (scored against the"
        " answers; needs --llm-model).",
    ),
]
LLMModelOption = Annotated[
    str | None, typer.Option(metavar="NAME", help="Model name at the --llm-base-url endpoint.")
]
LLMJudgeOption = Annotated[
    bool,
    typer.Option(
        "--llm-judge", help="Let that model grade each answer (YES/NO) instead of string matching."
    ),
]
ReplayOption = Annotated[
    bool,
    typer.Option(
        "--replay",
        help="Also replay every user turn: the share a provider's prompt cache serves and "
        "the input cost per turn, priced for --model (docs/caching.md).",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        metavar="N",
        help="Processes measuring conversations in parallel (default: one per CPU).",
    ),
]


class _EvalCommand(typer.core.TyperCommand):
    """``ctxwindow eval``, whose help ends with its datasets and strategies, read from their
    registries when the help is shown (so listing them costs the other commands nothing)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.epilog = _eval_choices(_help_width())
        super().format_help(ctx, formatter)


def _eval_choices(width: int) -> str:
    from rich.markup import escape

    from ctxwindow.eval import choices

    sections = [
        ("Datasets (--dataset SPEC)", choices.dataset_forms()),
        ("Built-in datasets (builtin:NAME)", choices.builtin_datasets()),
        ("Strategies (--strategies)", choices.strategies()),
    ]
    return "\n\n".join(
        f"[bold]{escape(title)}[/bold]\n" + escape(_rows(rows, width)) for title, rows in sections
    )


def _rows(rows: list[tuple[str, str]], width: int) -> str:
    """Name and description rows, the descriptions wrapped to ``width`` beside the names."""
    column = min(max(len(name) for name, _ in rows), 16) + 4
    lines = []
    for name, text in rows:
        first = f"  {name:<{column - 2}}" if len(name) <= column - 3 else None
        if first is None:
            lines.append(f"  {name}")
        wrapped = textwrap.wrap(
            text, max(width - column, 20), break_long_words=False, break_on_hyphens=False
        )
        lines.append((first or " " * column) + wrapped[0])
        lines += [" " * column + line for line in wrapped[1:]]
    return "\n".join(lines)


def _help_width() -> int:
    """The width the help is printed in (typer's rich console), less its padding."""
    from rich.console import Console

    fixed = os.environ.get("TERMINAL_WIDTH", "")
    return (int(fixed) if fixed.isdigit() else Console().width) - 2


@app.command("eval", cls=_EvalCommand)
def eval_command(
    dataset: DatasetOption = None,
    strategies: StrategiesOption = "message_window,token_window,hybrid,full",
    budgets: BudgetsOption = "1024,2048,4096,8192,16384",
    model: EvalModelOption = "gpt-4o",
    out: OutOption = Path("ctxwindow-report"),
    skip_invalid: SkipInvalidOption = False,
    include_unanswerable: IncludeUnanswerableOption = False,
    llm_base_url: LLMBaseURLOption = None,
    llm_model: LLMModelOption = None,
    llm_judge: LLMJudgeOption = False,
    workers: WorkersOption = None,
    estimate: EstimateOption = False,
    model_config: ModelConfigOption = None,
    replay: ReplayOption = False,
) -> None:
    """Measure context strategies and budgets; print a table, write a report.

    Writes DIR/results.json, DIR/report.html and the charts as PNG files
    (--out DIR). Progress goes to stderr: a bar on a terminal, a plain line
    every 5 % (or 30 s) otherwise.
    """
    from ctxwindow.eval.command import EvalOptions, run_command

    try:
        _use_models(model_config, estimate)
    except CtxWindowError as exc:
        _fail(str(exc))
    options = EvalOptions(
        datasets=dataset or ["builtin:all"],
        strategies=_split(strategies, "--strategies"),
        budgets=[_positive_int(b) for b in _split(budgets, "--budgets")],
        model=model,
        out=out,
        skip_invalid=skip_invalid,
        include_unanswerable=include_unanswerable,
        llm_base_url=llm_base_url,
        llm_model=llm_model,
        llm_judge=llm_judge,
        replay=replay,
        **({"workers": workers} if workers is not None else {}),
    )
    try:
        run_command(options)
    except (CtxWindowError, ValueError, ImportError) as exc:
        _fail(str(exc))


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(metavar="HOST", help="Address to bind (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(metavar="PORT", help="Port (default 8000).")] = None,
    store: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Store URL: sqlite:///PATH, redis://..., postgresql://... or memory://"
            " (default: sessions.db in the data folder).",
        ),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="OpenAI-compatible base URL to forward to (default https://api.openai.com/v1).",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Settings file (JSON or TOML)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(metavar="N", help="Worker processes sharing the store (default 1)."),
    ] = None,
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
        _fail(f"{exc}{hint}")
    try:
        serve_command(
            host, port, store, upstream, config, workers,
            models_file=model_config, unknown_models="estimate" if estimate else None,
        )  # fmt: skip
    except STARTUP_ERRORS as exc:
        _fail(" ".join(str(exc).split()))


def _split(value: str, option: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        _fail(f"{option} needs at least one value")
    return items


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        _fail(f"--budgets: {value!r} is not a positive integer")
    return number


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
