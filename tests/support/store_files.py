"""Store files as they were left: a SQLite file of an older schema, and a folder's fingerprint."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from ctxwindow import Entry
from ctxwindow.stores.base import encode_entry
from ctxwindow.stores.sqlite.schema import MIGRATIONS


def entry(text: str) -> Entry:
    return Entry({"role": "user", "content": text}, tokens=len(text), seq=0)


def older_file(path: Path, version: int) -> Entry:
    """A SQLite file as a ctxwindow of schema ``version`` left it (rollback journal, as
    one written by another tool would be), holding one session of one entry."""
    stored = entry("written by an older ctxwindow 🙂")
    conn = sqlite3.connect(path)
    for step in range(1, version + 1):
        MIGRATIONS[step](conn)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
    conn.execute(
        "INSERT INTO entries VALUES ('default:旧', 1, ?, ?, ?, ?)",
        (stored.id, encode_entry(stored, 1), stored.tokens, stored.created_at),
    )
    conn.commit()
    conn.close()
    return stored


def folder_state(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` with a hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
