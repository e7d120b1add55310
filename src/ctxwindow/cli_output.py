"""How the ``ctxwindow`` commands print: JSON, tables, and an error that ends a command.

A table is a rich table on a terminal and tab-separated lines when piped
(for ``cut`` and ``awk``); ``--json`` output is indented UTF-8. An error is
``ctxwindow: error: ...`` on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

import typer

NUMBERS = {"messages", "seq", "tokens"}  # the columns a table aligns right


def fail(message: str) -> NoReturn:
    """One line on stderr and exit status 2, as every ``ctxwindow`` command fails."""
    fail_as_given(" ".join(message.split()))


def fail_as_given(message: str) -> NoReturn:
    """``ctxwindow: error: MESSAGE`` on stderr, MESSAGE as it is (a dataset's problems are a
    line each), and exit status 2."""
    typer.echo(f"ctxwindow: error: {message}", err=True)
    raise typer.Exit(2)


def echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2))


def print_table(header: list[str], cells: list[list[str]], empty: str) -> None:
    """A rich table on a terminal; else tab-separated lines (tabs, newlines and backslashes
    in a cell escaped as ``\\t``, ``\\n``, ``\\\\``), a header first."""
    from rich.console import Console
    from rich.table import Column, Table

    console = Console()
    if not console.is_terminal:
        for line in [header, *cells]:
            typer.echo("\t".join(tsv_cell(cell) for cell in line))
        return
    if not cells:
        console.print(empty)
        return
    table = Table(
        *(Column(name, justify="right" if name in NUMBERS else "left") for name in header)
    )
    for row in cells:
        table.add_row(*row)
    console.print(table)


def tsv_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
