"""``ctxwindow sessions``: list, show, export and delete the sessions of a store (docs/cli.md).

A typer sub-app over the store of ``--store URL`` (``open_store``: SQLite,
Redis, PostgreSQL; by default the one ``ctxwindow serve`` uses), opened as it
is: a SQLite file that does not exist is an error, not a new database, and
``list``, ``show`` and ``export`` open it read-only (they change nothing: no
schema is created or migrated, a SQLite file is opened ``mode=ro``). Ids
are the ones the service's API and inspector show, of the tenant ``--tenant``
(``default``); the store keeps them as ``TENANT:ID`` (``session_key``). On a
terminal the output is a rich table; piped, it is tab-separated lines;
``--json`` is for programs. Errors (a bad URL, a server that does not answer,
an unknown session, with where else it is, a missing extra) are one line on
stderr starting ``ctxwindow: error:`` and exit status 2.
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
from typing import IO, Annotated, Any

import typer

from ctxwindow.cli_output import echo_json as echo_json  # cli_models reads these here too
from ctxwindow.cli_output import fail as fail
from ctxwindow.cli_output import print_table as print_table
from ctxwindow.cli_store import (
    entry_pages,
    every_entry,
    last_seq,
    missing,
    of_tenant,
    opened,
    other_tenants,
    page_of,
    summary,
)
from ctxwindow.cli_usage import Commands
from ctxwindow.messages import Entry
from ctxwindow.stores import entry_to_json
from ctxwindow.stores.tenants import ANONYMOUS, session_key, tenant_prefix

app = typer.Typer(
    name="sessions",
    cls=Commands,
    help="List, show, export and delete the sessions of a store.",
    no_args_is_help=True,
)

PREVIEW = 80  # characters of a message's one-line preview

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        envvar="CTXWINDOW_STORE",
        show_default=False,
        help="The store: sqlite:///PATH, redis://..., postgresql://... (default, as for"
        " ctxwindow serve: $CTXWINDOW_STORE, else sessions.db in $CTXWINDOW_DATA_DIR or the"
        " current folder).",
    ),
]
TenantOption = Annotated[
    str,
    typer.Option(
        "--tenant",
        metavar="NAME",
        help="Whose sessions: the tenant an API key of the service names (without API keys:"
        " default); '' for ids as the store keeps them (TENANT:ID, or a library's own).",
    ),
]
SessionArgument = Annotated[
    str, typer.Argument(metavar="SESSION", help="The session's id, as the API shows it.")
]
JSONOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


class Format(str, Enum):
    json = "json"
    jsonl = "jsonl"


@app.command("list")
def list_command(
    store: StoreOption = None,
    tenant: TenantOption = ANONYMOUS,
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
    """List a tenant's sessions, sorted by id: each one's messages and first and last times.

    A page at a time: when there are more, stderr says the --after that
    continues. --json prints {"object": "list", "data": [...], "first_id",
    "last_id", "has_more"}, as GET /v1/sessions answers (each session also
    with its "tenant").
    """
    with opened(store) as source:
        cursor = None if after is None else session_key(tenant, after)
        within = tenant_prefix(tenant, prefix or "") or None
        keys, more = page_of(source, within, cursor, None if every else limit)
        rows = [summary(source, tenant, key) for key in keys]
        if not keys and not prefix and after is None and tenant:
            other_tenants(source, tenant)
    if as_json:
        echo_json(listing(rows, more))
        return
    print_sessions(rows)
    if more:
        typer.echo(f"ctxwindow: more sessions: add --after {shlex.quote(rows[-1]['id'])}", err=True)


@app.command()
def show(
    session: SessionArgument,
    store: StoreOption = None,
    tenant: TenantOption = ANONYMOUS,
    full: Annotated[
        bool, typer.Option("--full", help="Whole texts instead of one-line previews.")
    ] = False,
    as_json: JSONOption = False,
) -> None:
    """Show a session's stored messages: seq, id, role, tokens, time and text."""
    with opened(store) as source:
        entries = every_entry(source, tenant, session)
    rows = [message_row(entry, full) for entry in entries]
    if as_json:
        shown = {"id": session, "tenant": tenant, "object": "session", "messages": len(rows)}
        echo_json({**shown, "data": rows})
    else:
        print_messages(rows)


@app.command()
def export(
    session: SessionArgument,
    store: StoreOption = None,
    tenant: TenantOption = ANONYMOUS,
    format: Annotated[
        Format, typer.Option("--format", help="json: one document; jsonl: an entry a line.")
    ] = Format.json,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write to FILE instead of stdout.")
    ] = None,
) -> None:
    """Export every stored entry of a session: ids, seqs, messages, tokens, metadata.

    json: {"session": ID, "tenant": NAME, "entries": [...]}; jsonl: one entry
    document a line, as the stores keep it. With --out, FILE appears only once
    whole (a FILE there is replaced).
    """
    if out is not None:
        check_out(out)
    with opened(store) as source:
        pages = entry_pages(source, tenant, session)
        first = next(pages)  # before FILE is made: an unknown session writes nothing
        with output(out) as stream:
            write_entries(stream, (session, tenant), format, itertools.chain([first], pages))


@app.command()
def delete(
    session: SessionArgument,
    store: StoreOption = None,
    tenant: TenantOption = ANONYMOUS,
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
    with opened(store, read_only=False) as source:
        key = session_key(tenant, session)
        size = last_seq(source, key)
        if not size:
            missing(source, tenant, session)
        named = f"session {session!r}{of_tenant(tenant)} ({size} message{'s' * (size != 1)})"
        if not (yes or confirmed(f"Delete {named} from {source.url}?")):
            typer.echo("ctxwindow: nothing deleted", err=True)
            raise typer.Exit(1)
        if archive is not None:
            forget_archived(archive, key)
        source.delete(key)
    typer.echo(f"deleted {named}")


# -- delete: asking first, and the archive ---------------------------------------------------


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


# -- export ---------------------------------------------------------------------------------


def write_entries(
    stream: IO[str], session: tuple[str, str], format: Format, pages: Iterable[list[Entry]]
) -> None:
    """The entries of ``session`` (id, tenant) as ``format``: each one the JSON document a
    store keeps."""
    documents = (entry_to_json(entry) for page in pages for entry in page)
    if format is Format.jsonl:
        for document in documents:
            stream.write(document + "\n")
        return
    session_id, tenant = (json.dumps(text, ensure_ascii=False) for text in session)
    stream.write(f'{{\n  "session": {session_id},\n  "tenant": {tenant},\n')
    stream.write('  "entries": [')
    for number, document in enumerate(documents):
        stream.write(("," if number else "") + "\n    " + document)
    stream.write("\n  ]\n}\n")


def check_out(out: Path) -> None:
    """Fail before any work if ``out`` cannot be the file written: a folder, or a path
    whose folder does not exist."""
    if out.is_dir():
        fail(f"--out {out} is a folder: --out names the file to write")
    if not out.parent.is_dir():
        fail(f"--out {out}: the folder {str(out.parent)!r} does not exist")


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
