"""``ctxwindow sessions list|show|export|delete`` over a real SQLite file, Redis and PostgreSQL.

Each test seeds a store through the library, under the store ids the service
gives the sessions of its tenant ``default`` (``session_key``), or through the
service itself, runs the command (typer's ``CliRunner``, or a subprocess where
the terminal, standard input or the installed modules matter) and reads the
store back. Redis tests work under a session-id prefix of their own (a URL
cannot name a key prefix) and delete their sessions after; PostgreSQL tests
get a schema of their own (the URL's ``search_path``), dropped after.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxwindow import Entry
from ctxwindow.cli import app
from ctxwindow.extras import install_hint
from ctxwindow.stores import entry_to_json, open_store
from ctxwindow.stores.tenants import ANONYMOUS, session_key, tenant_prefix

from .support.store_files import folder_state, older_file
from .support.stores import REDIS_URL, require_server

runner = CliRunner()

# Chinese, Japanese, emoji and mixed scripts, in ids and in texts.
LONG = "第一行：包裹 D-4 已从仓库发出。\n第二行" + "，很长的内容" * 20


@dataclass
class Seeded:
    url: str
    prefix: str  # every session of the test starts with it

    def sid(self, name: str) -> str:
        """The session's id, as the service's API shows it."""
        return self.prefix + name

    def key(self, name: str) -> str:
        """The session's id in the store: the tenant ``default``'s."""
        return session_key(ANONYMOUS, self.sid(name))


def conversation() -> list[Entry]:
    call = {"id": "c1", "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "東京"}'}}  # fmt: skip
    return [
        Entry({"role": "system", "content": "Answer briefly."}, 4, 0, pinned=True),
        Entry({"role": "user", "content": LONG}, 90, 0, metadata={"lang": "zh", "n": [1, 2]}),
        Entry({"role": "assistant", "content": None, "tool_calls": [call]}, 12, 0),
        Entry({"role": "tool", "tool_call_id": "c1", "content": "晴れ ☀️"}, 6, 0),
        Entry({"role": "user", "content": [{"type": "text", "text": "これは? 🎉"},
                                           {"type": "image_url", "image_url": {"url": "x"}}]},
              80, 0),
    ]  # fmt: skip


NAMES = ["会话", "日本語", "🎉", "user-1", "user-2", "mixé中😀"]


def seed(url: str, prefix: str) -> None:
    with open_store(url) as store:
        for name in NAMES:
            entries = conversation() if name == "会话" else conversation()[:2]
            store.append(session_key(ANONYMOUS, prefix + name), entries)


@pytest.fixture(params=["sqlite", "redis", "postgresql"])
def seeded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Seeded]:
    """A store of each kind holding ``NAMES`` under a prefix of the test's own."""
    prefix = f"cli-{uuid.uuid4().hex[:8]}-"
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / '会话.db'}"
        seed(url, prefix)
        yield Seeded(url, prefix)
    elif request.param == "redis":
        url = require_server("redis")
        seed(url, prefix)
        try:
            yield Seeded(url, prefix)
        finally:
            with open_store(url) as store:
                for key in store.sessions(prefix=tenant_prefix(ANONYMOUS, prefix)):
                    store.delete(key)
    else:
        with postgres_schema() as url:
            seed(url, prefix)
            yield Seeded(url, prefix)


@pytest.fixture
def sqlite_seeded(tmp_path: Path) -> Seeded:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    seed(url, "")
    return Seeded(url, "")


def postgres_schema() -> Any:
    """A schema of the test's own, as the URL's search_path; dropped after."""
    import contextlib

    @contextlib.contextmanager
    def schema() -> Iterator[str]:
        import psycopg

        base = require_server("postgresql")
        name = f"ctxwindow_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'CREATE SCHEMA "{name}"')
            try:
                yield f"{base}?options=-csearch_path%3D{name}"
            finally:
                admin.execute(f'DROP SCHEMA "{name}" CASCADE')

    return schema()


def run(*args: str, stdin: str | None = None, **env: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["sessions", *args], input=stdin, env=env or None)
    return result.exit_code, result.stdout, result.stderr


def ok_json(*args: str) -> Any:
    code, out, err = run(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def plain(text: str) -> str:
    """``text`` without the terminal's styles (bold headers)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def one_line_error(code: int, out: str, err: str, fragment: str) -> None:
    assert (code, out) == (2, ""), err
    assert err.startswith("ctxwindow: error: ") and fragment in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


# -- list -------------------------------------------------------------------------------------


def test_list_json_gives_every_session_with_its_size_and_times(seeded: Seeded) -> None:
    page = ok_json("list", "--store", seeded.url, "--prefix", seeded.prefix)
    assert [s["id"] for s in page["data"]] == sorted(seeded.sid(n) for n in NAMES)
    assert (page["has_more"], page["first_id"], page["last_id"]) == (
        False, page["data"][0]["id"], page["data"][-1]["id"],
    )  # fmt: skip
    sizes = {s["id"]: s["messages"] for s in page["data"]}
    assert sizes[seeded.sid("会话")] == 5 and sizes[seeded.sid("🎉")] == 2
    with open_store(seeded.url) as store:
        entries = store.load(seeded.key("会话"))
    chinese = next(s for s in page["data"] if s["id"] == seeded.sid("会话"))
    assert chinese["created_at"] == entries[0].created_at
    assert chinese["updated_at"] == entries[-1].created_at
    assert (chinese["object"], chinese["tenant"]) == ("session", "default")


def test_list_pages_with_limit_and_after(seeded: Seeded) -> None:
    seen: list[str] = []
    after: list[str] = []
    while True:
        code, out, err = run("list", "--store", seeded.url, "--prefix", seeded.prefix,
                             "--limit", "4", "--json", *after)  # fmt: skip
        page = json.loads(out)
        seen += [s["id"] for s in page["data"]]
        if not page["has_more"]:
            break
        after = ["--after", page["last_id"]]
    assert seen == sorted(seeded.sid(n) for n in NAMES)
    code, out, err = run("list", "--store", seeded.url, "--prefix", seeded.prefix, "--limit", "4")
    assert code == 0
    assert err.startswith("ctxwindow: more sessions: add --after ")
    every = ok_json("list", "--store", seeded.url, "--prefix", seeded.prefix, "--all")
    assert [s["id"] for s in every["data"]] == seen


def test_list_searches_by_prefix_in_any_script(seeded: Seeded) -> None:
    page = ok_json("list", "--store", seeded.url, "--prefix", seeded.sid("日本"))
    assert [s["id"] for s in page["data"]] == [seeded.sid("日本語")]
    page = ok_json("list", "--store", seeded.url, "--prefix", seeded.sid("user-"), "--limit", "1")
    assert ([s["id"] for s in page["data"]], page["has_more"]) == ([seeded.sid("user-1")], True)


def test_list_piped_prints_tab_separated_lines(sqlite_seeded: Seeded) -> None:
    code, out, err = run("list", "--store", sqlite_seeded.url)
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0] == "session\tmessages\tcreated\tupdated"
    assert [line.split("\t")[0] for line in lines[1:]] == sorted(NAMES)
    assert lines[1 + sorted(NAMES).index("会话")].split("\t")[1] == "5"


def test_list_on_a_terminal_prints_a_table(sqlite_seeded: Seeded) -> None:
    code, out, _ = run("list", "--store", sqlite_seeded.url,
                       TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="120")  # fmt: skip
    out = plain(out)
    assert code == 0
    assert "┃ session" in out and "messages" in out
    assert all(name in out for name in NAMES)


# -- show -------------------------------------------------------------------------------------


def test_show_json_lists_each_message_with_a_one_line_preview(seeded: Seeded) -> None:
    shown = ok_json("show", seeded.sid("会话"), "--store", seeded.url)
    rows = shown["data"]
    assert (shown["id"], shown["messages"]) == (seeded.sid("会话"), 5)
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["role"] for r in rows] == ["system", "user", "assistant", "tool", "user"]
    assert [r["tokens"] for r in rows] == [4, 90, 12, 6, 80]
    with open_store(seeded.url) as store:
        assert [r["id"] for r in rows] == [e.id for e in store.load(seeded.key("会话"))]
    assert "\n" not in rows[1]["text"] and rows[1]["text"].endswith("…")
    assert len(rows[1]["text"]) == 80
    assert rows[2]["text"] == '→ lookup({"q": "東京"})'
    assert rows[4]["text"] == "これは? 🎉 [image_url]"


def test_show_full_gives_whole_texts(sqlite_seeded: Seeded) -> None:
    rows = ok_json("show", "会话", "--store", sqlite_seeded.url, "--full")["data"]
    assert rows[1]["text"] == LONG
    code, out, _ = run("show", "会话", "--store", sqlite_seeded.url, "--full")
    assert code == 0
    assert out.splitlines()[2].endswith("\t" + LONG.replace("\n", "\\n"))  # one line a message


def test_show_on_a_terminal_prints_a_table(sqlite_seeded: Seeded) -> None:
    code, out, _ = run("show", "日本語", "--store", sqlite_seeded.url,
                       TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="160")  # fmt: skip
    out = plain(out)
    assert code == 0
    assert "┃ seq" in out and "system" in out and "包裹" in out


# -- export -----------------------------------------------------------------------------------


def test_export_json_round_trips_every_entry(seeded: Seeded, tmp_path: Path) -> None:
    code, out, err = run("export", seeded.sid("会话"), "--store", seeded.url)
    assert code == 0, err
    exported = json.loads(out)
    assert (exported["session"], exported["tenant"]) == (seeded.sid("会话"), "default")
    with open_store(seeded.url) as store:
        stored = store.load(seeded.key("会话"))
    assert [json.loads(entry_to_json(e)) for e in stored] == exported["entries"]
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    with open_store(copy) as target:  # a session moves between stores unchanged
        target.append("copy", [entry_of(document) for document in exported["entries"]])
        moved = target.load("copy")
    assert [(e.seq, e.id, e.message, e.metadata) for e in moved] == [
        (e.seq, e.id, e.message, e.metadata) for e in stored
    ]


def test_export_jsonl_to_a_file(seeded: Seeded, tmp_path: Path) -> None:
    target = tmp_path / "导出.jsonl"
    code, out, err = run("export", seeded.sid("会话"), "--store", seeded.url,
                         "--format", "jsonl", "--out", str(target))  # fmt: skip
    assert (code, out, err) == (0, "", "")
    lines = target.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3, 4, 5]
    assert json.loads(lines[1])["message"]["content"] == LONG
    assert json.loads(lines[1])["metadata"] == {"lang": "zh", "n": [1, 2]}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_export_of_an_unknown_session_writes_nothing(sqlite_seeded: Seeded, tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    result = run("export", "无此会话", "--store", sqlite_seeded.url, "--out", str(target))
    one_line_error(*result, "no session '无此会话'")
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("sessions.db")] == []


def entry_of(document: dict[str, Any]) -> Entry:
    fields = {k: document[k] for k in ("id", "pinned", "priority", "kind", "created_at")}
    return Entry(document["message"], document["tokens"], document["seq"],
                 metadata=document["metadata"], **fields)  # fmt: skip


# -- delete -----------------------------------------------------------------------------------


def test_delete_with_yes_removes_the_session(seeded: Seeded) -> None:
    code, out, err = run("delete", seeded.sid("🎉"), "--store", seeded.url, "--yes")
    assert (code, err) == (0, "")
    assert out == f"deleted session {seeded.sid('🎉')!r} of tenant 'default' (2 messages)\n"
    with open_store(seeded.url) as store:
        assert store.load(seeded.key("🎉")) == []
        assert seeded.key("🎉") not in store.sessions(prefix=seeded.key(""))


def test_delete_asks_first(seeded: Seeded) -> None:
    code, out, err = run("delete", seeded.sid("会话"), "--store", seeded.url, stdin="n\n")
    assert code == 1
    assert "Delete session" in out and "(5 messages)" in out
    assert err == "ctxwindow: nothing deleted\n"
    code, _, _ = run("delete", seeded.sid("会话"), "--store", seeded.url, stdin="")
    assert code == 1  # no answer at all is a no
    with open_store(seeded.url) as store:
        assert len(store.load(seeded.key("会话"))) == 5
    code, out, _ = run("delete", seeded.sid("会话"), "--store", seeded.url, stdin="y\n")
    assert code == 0 and "deleted session" in out
    with open_store(seeded.url) as store:
        assert store.load(seeded.key("会话")) == []


def test_delete_can_forget_the_archived_turns_too(sqlite_seeded: Seeded, tmp_path: Path) -> None:
    from ctxwindow.archive.sqlite import SQLiteArchive

    path = tmp_path / "archive.db"
    key = sqlite_seeded.key("会话")
    with open_store(sqlite_seeded.url) as store, SQLiteArchive(str(path)) as archive:
        archive.index(key, store.load(key))
    code, _, err = run("delete", "会话", "--store", sqlite_seeded.url, "-y",
                       "--archive", str(path))  # fmt: skip
    assert code == 0, err
    with SQLiteArchive(str(path)) as archive:
        assert archive.search(key, "包裹") == []
    result = run("delete", "日本語", "--store", sqlite_seeded.url, "-y", "--archive", "nowhere.db")
    one_line_error(*result, "no archive at 'nowhere.db'")


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "export", "delete"])
def test_an_unknown_session_is_an_error(seeded: Seeded, command: str) -> None:
    args = [command, seeded.sid("没有"), "--store", seeded.url]
    one_line_error(*run(*args, "--yes") if command == "delete" else run(*args), "no session")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("mysql://db/x", "unknown store URL 'mysql://db/x'"),
        ("sqlite://host/x.db", "a SQLite URL has no host"),
        ("sqlite:////no/such/directory/x.db", "does not exist"),
        ("redis://127.0.0.1:1/0", "Redis at redis://127.0.0.1:1/0 is unavailable"),
        ("postgresql://127.0.0.1:1/test", "PostgreSQL at postgresql://127.0.0.1:1/test is"),
    ],
)
def test_a_store_that_cannot_be_used_is_one_line(url: str, fragment: str) -> None:
    for args in (["list"], ["show", "s"], ["export", "s"], ["delete", "s", "--yes"]):
        one_line_error(*run(*args, "--store", url), fragment)


def test_a_bad_session_id_is_one_line(sqlite_seeded: Seeded) -> None:
    result = run("show", "x" * 300, "--store", sqlite_seeded.url)
    one_line_error(*result, "a session id must have 1 to 200 characters")
    result = run("show", "x" * 300, "--store", sqlite_seeded.url, "--tenant", "")
    one_line_error(*result, "a session id must be a non-empty string of at most 256")


def test_memory_is_an_empty_store_not_a_crash() -> None:
    code, out, err = run("list", "--store", "memory://", "--json")
    assert code == 0 and json.loads(out)["data"] == []
    assert err.startswith("ctxwindow: warning: memory:// is a new, empty store")
    code, out, err = run("show", "s", "--store", "memory://")
    assert code == 2
    assert (
        err.splitlines()[-1] == "ctxwindow: error: no session 's' of tenant 'default' in memory://"
    )


def test_the_store_comes_from_the_environment(sqlite_seeded: Seeded) -> None:
    code, out, _ = run("list", "--json", CTXWINDOW_STORE=sqlite_seeded.url)
    assert code == 0 and len(json.loads(out)["data"]) == len(NAMES)


# -- the service's ids, tenants and store ----------------------------------------------------

KEYS = {"key-a": "alice", "key-b": "bob"}


def through_the_service(url: str, data_dir: Path, sessions: dict[str, list[str]]) -> Any:
    """The service over the store ``url``, ``sessions`` (API key -> ids) appended through its
    API; returns its test client, open (the caller closes it)."""
    import httpx
    from fastapi.testclient import TestClient

    from ctxwindow.server import Settings, create_app

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"the sessions API never calls the upstream ({request.url})")

    settings = Settings(store=url, data_dir=data_dir, upstream="http://upstream.test/v1",
                        api_keys=KEYS if set(sessions) != {""} else {})  # fmt: skip
    http = TestClient(create_app(settings, upstream_transport=httpx.MockTransport(refuse)))
    http.__enter__()
    for key, ids in sessions.items():
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        for number, session_id in enumerate(ids, 1):
            path = f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}/messages"
            body = {"messages": [{"role": "user", "content": f"第{i}条 🎉"} for i in range(number)]}
            assert http.post(path, json=body, headers=headers).status_code == 200
    return http


def test_ids_and_tenants_are_the_apis(tmp_path: Path) -> None:
    """Each tenant's sessions, with the ids GET /v1/sessions gives that tenant."""
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    alice, bob = ["会话", "user-1", "🎉", "Å"], ["会话", "日本語のセッション"]
    http = through_the_service(url, tmp_path, {"key-a": alice, "key-b": bob})
    try:
        for key, tenant in KEYS.items():
            api = http.get("/v1/sessions", headers={"Authorization": f"Bearer {key}"}).json()
            cli = ok_json("list", "--store", url, "--tenant", tenant)
            assert [s["id"] for s in cli["data"]] == [s["id"] for s in api["data"]]
            assert [s["messages"] for s in cli["data"]] == [s["messages"] for s in api["data"]]
            assert {s["tenant"] for s in cli["data"]} == {tenant}
        assert {s["id"] for s in ok_json("list", "--store", url, "--tenant", "bob")["data"]} == set(
            bob
        )
        shown = ok_json("show", "会话", "--store", url, "--tenant", "bob")
        assert (shown["id"], shown["tenant"], shown["messages"]) == ("会话", "bob", 1)
        decomposed = "A\u030a"  # Å as A and a combining ring: the same session, as for the API
        assert ok_json("show", decomposed, "--store", url, "--tenant", "alice")["messages"] == 4
        code, out, err = run("delete", "user-1", "--store", url, "--tenant", "alice", "--yes")
        assert (code, err) == (0, "")
        assert out == "deleted session 'user-1' of tenant 'alice' (2 messages)\n"
        response = http.get(
            "/v1/sessions/user-1/messages", headers={"Authorization": "Bearer key-a"}
        )
        assert response.status_code == 404
    finally:
        http.__exit__(None, None, None)


def test_without_api_keys_the_tenant_is_default(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    http = through_the_service(url, tmp_path, {"": ["user-42", "会话-7"]})
    try:
        api = http.get("/v1/sessions").json()
        assert [s["id"] for s in ok_json("list", "--store", url)["data"]] == [
            s["id"] for s in api["data"]
        ] == ["user-42", "会话-7"]  # fmt: skip
        assert ok_json("show", "会话-7", "--store", url)["messages"] == 2
    finally:
        http.__exit__(None, None, None)


@pytest.fixture
def mixed(tmp_path: Path) -> str:
    """A store with a session of the tenant ``default``, one of ``acme`` and one written by
    the library (an id with no tenant)."""
    url = f"sqlite:///{tmp_path / '混合.db'}"
    with open_store(url) as store:
        store.append("default:user-42", conversation()[:2])
        store.append("acme:会话", conversation())
        store.append("library-1", conversation()[:1])
    return url


def shown(url: str) -> str:
    """The URL of a store as its messages show it (a path's Unicode percent-encoded)."""
    with open_store(url) as store:
        return store.url


@pytest.mark.parametrize(
    ("session", "hint"),
    [
        ("default:user-42", "; ids are written without their tenant: did you mean 'user-42'?"),
        (
            "acme:会话",
            "; ids are written without their tenant: did you mean '会话' with --tenant acme?",
        ),
        ("会话", "; tenant 'acme' has one: add --tenant acme"),
        ("library-1", "; the store has 'library-1' with no tenant: add --tenant ''"),
    ],
)
@pytest.mark.parametrize("command", ["show", "export", "delete"])
def test_a_miss_says_where_the_session_is(
    mixed: str, command: str, session: str, hint: str
) -> None:
    yes = ["-y"] if command == "delete" else []
    code, out, err = run(command, session, "--store", mixed, *yes)
    where = shown(mixed)
    one_line_error(code, out, err, f"no session {session!r} of tenant 'default' in {where}{hint}")
    with open_store(mixed) as store:
        assert len(store.sessions()) == 3  # nothing deleted


def test_a_miss_nowhere_else_has_no_hint(mixed: str) -> None:
    code, out, err = run("show", "nobody", "--store", mixed)
    assert (code, out) == (2, "")
    assert err == f"ctxwindow: error: no session 'nobody' of tenant 'default' in {shown(mixed)}\n"


def test_the_tenant_given_finds_each_session(mixed: str) -> None:
    assert ok_json("show", "user-42", "--store", mixed)["messages"] == 2
    assert ok_json("show", "会话", "--store", mixed, "--tenant", "acme")["messages"] == 5
    assert ok_json("show", "library-1", "--store", mixed, "--tenant", "")["messages"] == 1
    every = ok_json("list", "--store", mixed, "--tenant", "")["data"]
    assert [s["id"] for s in every] == ["acme:会话", "default:user-42", "library-1"]


def test_a_tenant_without_sessions_hears_whose_the_store_has(mixed: str) -> None:
    code, out, err = run("list", "--store", mixed, "--tenant", "bob")
    assert (code, out) == (0, "session\tmessages\tcreated\tupdated\n")
    assert err == (
        f"ctxwindow: no sessions of tenant 'bob' in {shown(mixed)}; it has sessions of 'acme',"
        " 'default' (--tenant NAME) and with no tenant (--tenant '')\n"
    )


def test_the_default_store_is_the_one_serve_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --store and $CTXWINDOW_STORE: sessions.db in $CTXWINDOW_DATA_DIR, else in the
    current folder, as ``ctxwindow serve`` (``Settings.store_url``) opens it."""
    from ctxwindow.server import Settings

    monkeypatch.delenv("CTXWINDOW_STORE", raising=False)
    monkeypatch.delenv("CTXWINDOW_DATA_DIR", raising=False)
    here, data = tmp_path / "这里", tmp_path / "data"
    here.mkdir()
    data.mkdir()
    monkeypatch.chdir(here)
    for folder, name in [(here, "在这里"), (data, "in-data")]:
        with open_store(Settings(data_dir=folder).store_url()) as store:
            store.append(session_key(ANONYMOUS, name), conversation()[:1])
    assert [s["id"] for s in ok_json("list")["data"]] == ["在这里"]
    monkeypatch.setenv("CTXWINDOW_DATA_DIR", str(data))
    assert [s["id"] for s in ok_json("list")["data"]] == ["in-data"]


def test_no_command_makes_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SQLite file that is not there is an error naming it: no new, empty database."""
    monkeypatch.delenv("CTXWINDOW_STORE", raising=False)
    monkeypatch.delenv("CTXWINDOW_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "typo.db"
    for args in (["list"], ["show", "s"], ["export", "s"], ["delete", "s", "--yes"]):
        result = run(*args, "--store", f"sqlite:///{typo}")
        one_line_error(*result, f"no SQLite store at {str(typo)!r}: the file does not exist")
        result = run(*args)
        one_line_error(
            *result,
            f"no SQLite store at {str(tmp_path / 'sessions.db')!r}: the file does not exist"
            " (the default store, as for ctxwindow serve; give --store URL)",
        )
    (tmp_path / "folder.db").mkdir()
    one_line_error(*run("list", "--store", "sqlite:///folder.db"), "the file is not a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.db"]


def test_looking_changes_nothing_and_delete_still_writes(tmp_path: Path) -> None:
    """list, show and export open the store read-only: a file an older ctxwindow wrote is
    read as it is (not migrated: every byte stays, nothing is made beside it); delete,
    which writes, opens it to write (and so migrates it)."""
    path = tmp_path / "old.db"
    stored = older_file(path, 2)  # no checkpoints table, no partial index
    url = f"sqlite:///{path}"
    before = folder_state(tmp_path)
    assert [s["id"] for s in ok_json("list", "--store", url)["data"]] == ["旧"]
    assert ok_json("show", "旧", "--store", url)["data"][0]["id"] == stored.id
    code, out, err = run("export", "旧", "--store", url, "--format", "jsonl")
    assert code == 0 and json.loads(out)["id"] == stored.id, err
    assert folder_state(tmp_path) == before
    assert run("delete", "旧", "--store", url, "--yes")[0] == 0
    with open_store(url) as store:
        assert store.sessions() == []


def test_looking_into_an_empty_postgres_database_creates_no_tables() -> None:
    import psycopg

    with postgres_schema() as url:
        for args in (["list"], ["show", "s"], ["export", "s"]):
            one_line_error(*run(*args, "--store", url), "holds no ctxwindow tables")
        schema = urllib.parse.unquote(url).rpartition("search_path=")[2]
        with psycopg.connect(require_server("postgresql")) as conn:
            query = "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s"
            assert conn.execute(query, (schema,)).fetchone() == (0,)


def test_a_path_for_a_url_gets_the_url_to_write(tmp_path: Path) -> None:
    one_line_error(
        *run("list", "--store", "sessions.db"),
        "unknown store URL 'sessions.db': the supported schemes are memory://, sqlite://,"
        " redis://, rediss://, unix://, redis+cluster://, rediss+cluster://, postgresql://,"
        " postgres://; for a SQLite file write 'sqlite:///sessions.db'",
    )
    one_line_error(*run("list", "--store", "/srv/会话.db"), "write 'sqlite:////srv/会话.db'")


def test_export_checks_its_file_before_any_work(mixed: str, tmp_path: Path) -> None:
    folder = tmp_path / "导出"
    folder.mkdir()
    one_line_error(*run("export", "user-42", "--store", mixed, "--out", str(folder)),
                   f"--out {folder} is a folder: --out names the file to write")  # fmt: skip
    assert list(folder.iterdir()) == []
    target = tmp_path / "无" / "x.json"
    one_line_error(*run("export", "user-42", "--store", mixed, "--out", str(target)),
                   f"the folder {str(target.parent)!r} does not exist")  # fmt: skip


# -- as a process -----------------------------------------------------------------------------


def cli(*args: str, stdin: str = "", preamble: str = "") -> subprocess.CompletedProcess[str]:
    """``python -m ctxwindow.cli sessions ARGS``, after ``preamble`` (Python) runs."""
    code = (
        f"{preamble}\nimport sys\nfrom ctxwindow.cli import main\nsys.argv[0] = 'ctxwindow'\nmain()"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "sessions", *args], input=stdin, capture_output=True,
        text=True, encoding="utf-8", check=False, env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip


def test_a_missing_extra_says_what_to_install() -> None:
    for module, url, extra in [("redis", REDIS_URL, "redis"),
                               ("psycopg", "postgresql://127.0.0.1/test", "postgres")]:  # fmt: skip
        result = cli("list", "--store", url, preamble=f"import sys; sys.modules[{module!r}] = None")
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("ctxwindow: error: ")
        assert install_hint(extra) in result.stderr
        assert result.stderr.count("\n") == 1


def test_the_command_as_a_process(seeded: Seeded) -> None:
    result = cli("list", "--store", seeded.url, "--prefix", seeded.prefix, "--json")
    assert result.returncode == 0, result.stderr
    assert [s["id"] for s in json.loads(result.stdout)["data"]] == sorted(
        seeded.sid(n) for n in NAMES
    )
    declined = cli("delete", seeded.sid("日本語"), "--store", seeded.url, stdin="no\n")
    assert declined.returncode == 1
    deleted = cli("delete", seeded.sid("日本語"), "--store", seeded.url, stdin="yes\n")
    assert deleted.returncode == 0
    assert deleted.stdout.endswith(
        f"deleted session {seeded.sid('日本語')!r} of tenant 'default' (2 messages)\n"
    )
