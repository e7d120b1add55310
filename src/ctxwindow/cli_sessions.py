"""``ctxwindow sessions``: list, show, export and delete the sessions of a store (docs/cli.md).

A typer sub-app over the store of ``--store URL`` (``open_store``: SQLite,
Redis, PostgreSQL). On a terminal the output is a rich table; piped, it is
tab-separated lines; ``--json`` is for programs. Ids are the store's own: a
session the service keeps for a tenant is ``TENANT:ID``. Errors (a bad URL, a
server that does not answer, an unknown session, a missing extra) are one
line on stderr starting ``ctxwindow: error:`` and exit status 2.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any, NoReturn

import typer

from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores import Store, entry_to_json, open_store

app = typer.Typer(
    name="sessions",
    help="List, show, export and delete the sessions of a store.",
    no_args_is_help=True,
)

PAGE = 1000  # entries, or sessions, read from the store at a time
PREVIEW = 80  # characters of a message's one-line preview
NUMBERS = {"messages", "seq", "tokens"}  # the columns a table aligns right

StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        metavar="URL",
        envvar="CTXWINDOW_STORE",
        show_default=False,
        help="The store: sqlite:///PATH, redis://..., postgresql://... (default:"
        " $CTXWINDOW_STORE, as for ctxwindow serve).",
    ),
]
SessionArgument = Annotated[str, typer.Argument(metavar="SESSION", help="The session's id.")]
JSONOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


class Format(str, Enum):
    json = "json"
    jsonl = "jsonl"


@app.command("list")
def list_command(
    store: StoreOption,
    prefix: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Only ids starting with TEXT.")
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, metavar="N", help="Sessions on the page (with --all: ignored).")
    ] = 50,
    after: Annotated[
        str | None,
        typer.Option(metavar="ID", help="Start after this id: the last one of the page before."),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every session, not one page.")] = False,
    as_json: JSONOption = False,
) -> None:
    """List sessions, sorted by id: each one's messages and first and last times.

    A page at a time: when there are more, stderr says the --after that
    continues. --json prints {"object": "list", "data": [...], "first_id",
    "last_id", "has_more"}, as GET /v1/sessions answers.
    """
    with opened(store) as source:
        ids, more = page_of(source, prefix, after, None if every else limit)
        rows = [summary(source, session_id) for session_id in ids]
    if as_json:
        echo_json(listing(rows, more))
        return
    print_sessions(rows)
    if more:
        typer.echo(f"ctxwindow: more sessions: add --after {shlex.quote(ids[-1])}", err=True)


@app.command()
def show(
    session: SessionArgument,
    store: StoreOption,
    full: Annotated[
        bool, typer.Option("--full", help="Whole texts instead of one-line previews.")
    ] = False,
    as_json: JSONOption = False,
) -> None:
    """Show a session's stored messages: seq, id, role, tokens, time and text."""
    with opened(store) as source:
        entries = every_entry(source, session)
    rows = [message_row(entry, full) for entry in entries]
    if as_json:
        echo_json({"id": session, "object": "session", "messages": len(rows), "data": rows})
    else:
        print_messages(rows)


@app.command()
def export(
    session: SessionArgument,
    store: StoreOption,
    format: Annotated[
        Format, typer.Option("--format", help="json: one document; jsonl: an entry a line.")
    ] = Format.json,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write to FILE instead of stdout.")
    ] = None,
) -> None:
    """Export every stored entry of a session: ids, seqs, messages, tokens, metadata.

    json: {"session": ID, "entries": [...]}; jsonl: one entry document a
    line, as the stores keep it. With --out, FILE appears only once whole.
    """
    with opened(store) as source:
        pages = entry_pages(source, session)
        first = next(pages)  # before FILE is made: an unknown session writes nothing
        with output(out) as stream:
            write_entries(stream, session, format, itertools.chain([first], pages))


@app.command()
def delete(
    session: SessionArgument,
    store: StoreOption,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    archive: Annotated[
        str | None,
        typer.Option(
            metavar="PATH|URL",
            help="Also forget the session in this recall archive (the service's archive.db,"
            " or its postgresql:// URL).",
        ),
    ] = None,
) -> None:
    """Delete a session: its entries, idempotency keys and checkpoint.

    Asks first, unless --yes; exit status 1 if the answer is no.
    """
    with opened(store) as source:
        size = last_seq(source, session)
        if not size:
            missing(source, session)
        question = f"Delete session {session!r} ({size} messages) from {source.url}?"
        if not (yes or confirmed(question)):
            typer.echo("ctxwindow: nothing deleted", err=True)
            raise typer.Exit(1)
        if archive is not None:
            forget_archived(archive, session)
        source.delete(session)
    typer.echo(f"deleted session {session!r} ({size} messages)")


# -- the store, opened for one command ----------------------------------------------------


@contextlib.contextmanager
def opened(url: str) -> Iterator[Store]:
    """The store of ``url``, closed at the end; any store failure ends the command in one
    line (exit status 2)."""
    try:
        if url.startswith("memory:"):
            typer.echo(
                "ctxwindow: warning: memory:// is a new, empty store: it holds no sessions",
                err=True,
            )
        with open_store(url) as store:
            yield store
    except (StoreError, ImportError, ValueError) as exc:
        fail(str(exc))


def fail(message: str) -> NoReturn:
    """One line on stderr and exit status 2, as every ``ctxwindow`` command fails."""
    typer.echo(f"ctxwindow: error: {' '.join(message.split())}", err=True)
    raise typer.Exit(2)


def missing(store: Store, session_id: str) -> NoReturn:
    fail(f"no session {session_id!r} in {store.url}")


def page_of(
    store: Store, prefix: str | None, after: str | None, limit: int | None
) -> tuple[list[str], bool]:
    """The ids of one page (every id for ``limit=None``), and whether more follow."""
    if limit is not None:
        ids = store.sessions(prefix=prefix, after=after, limit=limit + 1)
        return ids[:limit], len(ids) > limit
    ids = []
    while page := store.sessions(prefix=prefix, after=after, limit=PAGE):
        ids += page
        after = page[-1]
    return ids, False


def summary(store: Store, session_id: str) -> dict[str, Any]:
    """A session as GET /v1/sessions shows one: messages stored, first and last times."""
    first, last = store.load(session_id, limit=1), store.tail(session_id, 1)
    return {
        "id": session_id,
        "object": "session",
        "messages": last[0].seq if last else 0,
        "created_at": first[0].created_at if first else None,
        "updated_at": last[0].created_at if last else None,
    }


def last_seq(store: Store, session_id: str) -> int:
    last = store.tail(session_id, 1)
    return last[0].seq if last else 0


def entry_pages(store: Store, session_id: str) -> Iterator[list[Entry]]:
    """The session's entries, ``PAGE`` at a time; an unknown session fails at the first."""
    page = store.load(session_id, limit=PAGE)
    if not page:
        missing(store, session_id)
    while page:
        yield page
        page = store.load(session_id, after=page[-1].seq, limit=PAGE)


def every_entry(store: Store, session_id: str) -> list[Entry]:
    return [entry for page in entry_pages(store, session_id) for entry in page]


def confirmed(question: str) -> bool:
    """The user's answer; no answer (end of input) is a no."""
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:  # end of input, or Ctrl-C
        typer.echo(err=True)
        return False


def forget_archived(where: str, session_id: str) -> None:
    """Forget the session in the recall archive at ``where`` (a PostgreSQL URL or a file)."""
    if where.startswith(("postgresql://", "postgres://")):
        from ctxwindow.archive.postgres import PostgresArchive

        archive: Any = PostgresArchive(where)
    elif os.path.isfile(where):
        from ctxwindow.archive.sqlite import SQLiteArchive

        archive = SQLiteArchive(where)
    else:
        fail(f"no archive at {where!r}")
    try:
        archive.forget(session_id)
    finally:
        archive.close()


# -- what is printed ------------------------------------------------------------------------


def listing(rows: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": rows,
        "first_id": rows[0]["id"] if rows else None,
        "last_id": rows[-1]["id"] if rows else None,
        "has_more": more,
    }


def message_row(entry: Entry, full: bool) -> dict[str, Any]:
    text = text_of(entry.message)
    return {
        "seq": entry.seq,
        "id": entry.id,
        "role": entry.message.get("role"),
        "tokens": entry.tokens,
        "created_at": entry.created_at,
        "text": text if full else preview(text),
    }


def text_of(message: dict[str, Any]) -> str:
    """What a message says: its text (``[image]`` for an image part) and its tool calls."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(
            str(part.get("text", "")) if part.get("type") == "text" else f"[{part.get('type')}]"
            for part in content
            if isinstance(part, dict)
        )
    calls = [call_text(call) for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    text = content if isinstance(content, str) else ""
    return "\n".join(part for part in [text, *calls] if part)


def call_text(call: dict[str, Any]) -> str:
    """A tool call as ``→ name(arguments)``."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    return f"→ {function.get('name')}({function.get('arguments', '')})"


def preview(text: str) -> str:
    """``text`` on one line, cut at ``PREVIEW`` characters (the cut marked ``…``)."""
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW else line[: PREVIEW - 1] + "…"


def when(timestamp: float | None) -> str:
    """A time as ISO 8601 in UTC, to the second (empty for None)."""
    if timestamp is None:
        return ""
    moment = datetime.fromtimestamp(timestamp, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2))


def print_sessions(rows: list[dict[str, Any]]) -> None:
    cells = [
        [row["id"], str(row["messages"]), when(row["created_at"]), when(row["updated_at"])]
        for row in rows
    ]
    print_table(["session", "messages", "created", "updated"], cells, "no sessions")


def print_messages(rows: list[dict[str, Any]]) -> None:
    cells = [
        [str(row["seq"]), row["id"], str(row["role"]), str(row["tokens"]),
         when(row["created_at"]), row["text"]]
        for row in rows
    ]  # fmt: skip
    print_table(["seq", "id", "role", "tokens", "created", "text"], cells, "no messages")


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


# -- export ---------------------------------------------------------------------------------


def write_entries(
    stream: IO[str], session_id: str, format: Format, pages: Iterable[list[Entry]]
) -> None:
    """The entries as ``format``: each one the JSON document a store keeps."""
    documents = (entry_to_json(entry) for page in pages for entry in page)
    if format is Format.jsonl:
        for document in documents:
            stream.write(document + "\n")
        return
    stream.write(f'{{\n  "session": {json.dumps(session_id, ensure_ascii=False)},\n')
    stream.write('  "entries": [')
    for number, document in enumerate(documents):
        stream.write(("," if number else "") + "\n    " + document)
    stream.write("\n  ]\n}\n")


@contextlib.contextmanager
def output(out: Path | None) -> Iterator[IO[str]]:
    """Standard output, or ``out`` written whole or not at all (a file beside it, renamed)."""
    if out is None:
        yield sys.stdout
        return
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    try:
        with open(handle, "w", encoding="utf-8", newline="\n") as stream:
            yield stream
        os.replace(temporary, out)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
