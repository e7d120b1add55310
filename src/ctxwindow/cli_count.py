"""``ctxwindow count``: the prompt tokens a request costs (docs/cli.md).

The request is read from a file or standard input: a JSON array of chat
messages, or a request body with ``"messages"`` (and ``"tools"``), checked as
the service checks one; bad input is an ``InputError`` that says where.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxwindow.cli_options import EstimateOption, ModelConfigOption, use_model_options
from ctxwindow.cli_output import fail_as_given
from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import validate_message
from ctxwindow.tokens import chat_tokenizer


class InputError(CtxWindowError):
    """The command's input cannot be used; the text says why."""


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
    use_model_options(model_config, estimate)
    try:
        _count(_read(file), _input_name(file), model, tools, text, as_json, estimate)
    except CtxWindowError as exc:
        fail_as_given(str(exc))


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
