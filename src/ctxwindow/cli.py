"""The ``ctxwindow`` command line (docs/cli.md).

Every command prints its result on stdout; bad input is one line on stderr
starting with ``ctxwindow: error:`` and exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from ctxwindow.cli_sessions import app as sessions_app
from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import validate_message
from ctxwindow.tokens import chat_tokenizer

app = typer.Typer(
    name="ctxwindow",
    help="Keep LLM conversations inside their token budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class InputError(CtxWindowError):
    """The command's input cannot be used; the text says why."""


@app.callback()
def _root() -> None:
    """Keep LLM conversations inside their token budget."""


# How every command is told about models beyond the built-in ones (docs/models.md).
ModelConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--model-config",
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
    from ctxwindow.tokens.registry import use_models

    if config is not None:
        os.environ["CTXWINDOW_MODEL_CONFIG"] = str(config.expanduser().resolve())
    if estimate:
        os.environ["CTXWINDOW_UNKNOWN_MODELS"] = "estimate"
    if config is not None or estimate:
        use_models(None)  # read again from the environment, checked now


@app.command()
def count(
    file: Annotated[str, typer.Argument(help="JSON file of chat messages, or - for stdin.")] = "-",
    model: Annotated[
        str, typer.Option(help="Model whose tokenizer and chat framing count the request.")
    ] = "gpt-4o",
    tools: Annotated[
        Path | None, typer.Option(help="JSON file with the request's tool definitions.")
    ] = None,
    text: Annotated[bool, typer.Option("--text", help="Plain text, no chat framing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a per-message breakdown.")] = False,
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
        _count(_read(file), model, tools, text, as_json, estimate)
    except CtxWindowError as exc:
        _fail(str(exc))


def _count(
    raw: str, model: str, tools_file: Path | None, text: bool, as_json: bool, estimate: bool
) -> None:
    tokenizer = chat_tokenizer(model, estimate=estimate)
    if text:
        n = tokenizer.text(raw)
        typer.echo(json.dumps({"model": model, "tokens": n}) if as_json else n)
        return
    messages, tools = _parse_request(raw)
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


def _parse_request(raw: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    data = _load_json(raw, "input")
    tools = None
    if isinstance(data, dict) and "messages" in data:
        tools = _check_tools(data.get("tools"), "input 'tools'")
        data = data["messages"]
    if not isinstance(data, list):
        raise InputError(
            f"input must be a JSON array of chat messages, got a JSON {type(data).__name__}"
        )
    for i, message in enumerate(data):
        validate_message(message, where=f"message {i}")
    return data, tools


def _parse_tools(raw: str, where: str) -> list[dict[str, Any]] | None:
    return _check_tools(_load_json(raw, where), where)


def _check_tools(tools: Any, where: str) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise InputError(f"{where}: tools must be a JSON array of tool objects")
    for i, tool in enumerate(tools):
        function = tool.get("function", tool)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InputError(f"{where}: tool {i} has no function name")
    return tools


def _load_json(raw: str, where: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON: {exc}") from exc


def _read(file: str) -> str:
    try:
        if file == "-":
            return sys.stdin.read()
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {file}: {exc}") from exc


def _fail(message: str) -> NoReturn:
    typer.echo(f"ctxwindow: error: {message}", err=True)
    raise typer.Exit(2)


# The options of ``ctxwindow eval``, named so the command reads as a list of them.
DatasetOption = Annotated[
    list[str] | None,
    typer.Option(
        help="builtin:NAME, locomo:PATH, longmemeval:PATH or a .json/.jsonl file; "
        "repeat for several."
    ),
]
StrategiesOption = Annotated[str, typer.Option(help="Comma-separated strategy names.")]
BudgetsOption = Annotated[str, typer.Option(help="Comma-separated token budgets.")]
EvalModelOption = Annotated[str, typer.Option(help="Model for token counts and prices.")]
OutOption = Annotated[Path, typer.Option(help="Folder for results.json, report.html, charts.")]
SkipInvalidOption = Annotated[
    bool, typer.Option("--skip-invalid", help="Leave out invalid conversations/questions.")
]
IncludeUnanswerableOption = Annotated[
    bool,
    typer.Option(
        "--include-unanswerable",
        help="locomo:/longmemeval: also measure questions with no answer in the conversation.",
    ),
]
LLMBaseURLOption = Annotated[
    str | None, typer.Option(help="OpenAI-compatible endpoint to answer the questions.")
]
LLMModelOption = Annotated[str | None, typer.Option(help="Model name at that endpoint.")]
LLMJudgeOption = Annotated[
    bool, typer.Option("--llm-judge", help="Let the model grade answers (YES/NO).")
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
        min=1, help="Processes measuring conversations in parallel (default: one per CPU)."
    ),
]


@app.command("eval")
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

    Writes OUT/results.json, OUT/report.html and the charts as PNG files.
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
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000).")] = None,
    store: Annotated[str | None, typer.Option(help="Store URL (default SQLite).")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL to forward to.")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="Settings file (JSON or TOML).")] = None,
    workers: Annotated[
        int | None, typer.Option(help="Worker processes sharing the store (default 1).")
    ] = None,
    estimate: EstimateOption = False,
    model_config: ModelConfigOption = None,
) -> None:
    """Run the OpenAI-compatible context service (docs/server.md).

    Every option can also come from CTXWINDOW_* environment variables; the
    upstream API key only from the environment.
    """
    try:
        from ctxwindow.server.main import serve_command
    except ImportError as exc:
        _fail(f"the server needs its extra: pip install 'ctxwindow[server]' ({exc})")
    try:
        serve_command(
            host, port, store, upstream, config, workers,
            models_file=model_config, unknown_models="estimate" if estimate else None,
        )  # fmt: skip
    except (ValueError, CtxWindowError) as exc:
        _fail(str(exc))


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
