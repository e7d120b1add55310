"""``GET /v1/sessions``: each tenant's sessions, a page at a time, over every real store.

Two tenants (API keys ``key-a`` → alice, ``key-b`` → bob) write sessions
through the sessions API; the list shows each only its own, with the ids it
wrote, sorted by code point, in OpenAI's list shape.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ctxwindow import Entry
from ctxwindow.server import Settings, create_app
from ctxwindow.server.calibration import SESSION as CALIBRATION

from .support.stores import async_stores

ALICE = {"Authorization": "Bearer key-a"}
BOB = {"Authorization": "Bearer key-b"}
KEYS = {"key-a": "alice", "key-b": "bob"}
# ASCII, Chinese, Japanese (kana and kanji), emoji beyond the BMP, mixed scripts.
IDS = [
    "user-1",
    "user-2",
    "user-10",
    "会话",
    "会话🎉",
    "日本語のセッション",
    "カタカナ",
    "🎉",
    "mixé中😀",
]


def refuse(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the sessions API never calls the upstream ({request.url})")


@pytest.fixture(params=["memory", "sqlite", "redis", "postgresql"])
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Opens stores on one fresh set of data of each kind (real servers for Redis, PostgreSQL)."""
    with async_stores(request.param, tmp_path) as open_store:
        yield open_store


def client(opened: Any, **settings: Any) -> TestClient:
    settings.setdefault("api_keys", KEYS)
    app = create_app(
        Settings(store="memory://", upstream="http://upstream.test/v1", **settings),
        upstream_transport=httpx.MockTransport(refuse),
        store=opened(),
    )
    return TestClient(app)


@pytest.fixture
def http(opened: Any) -> Iterator[TestClient]:
    with client(opened) as http:
        yield http


def append(http: TestClient, session_id: str, *texts: str, headers: dict[str, str]) -> None:
    path = f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}/messages"
    body = {"messages": [{"role": "user", "content": text} for text in texts]}
    response = http.post(path, json=body, headers=headers)
    assert response.status_code == 200, response.text


def listed(http: TestClient, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    response = http.get("/v1/sessions", params=params, headers=headers)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def ids(page: dict[str, Any]) -> list[str]:
    return [session["id"] for session in page["data"]]


def every_id(http: TestClient, headers: dict[str, str], limit: int, **params: Any) -> list[str]:
    """Every id, read page by page (``after`` = the ``last_id`` of the page before)."""
    seen: list[str] = []
    page = listed(http, headers, limit=limit, **params)
    while True:
        assert len(page["data"]) <= limit
        cursors = [s.get("ref", s["id"]) for s in page["data"]]  # a handle, when redacted
        assert page["first_id"] == (cursors[0] if cursors else None)
        assert page["last_id"] == (cursors[-1] if cursors else None)
        seen += ids(page)
        if not page["has_more"]:
            return seen
        page = listed(http, headers, limit=limit, after=page["last_id"], **params)


def test_each_tenant_lists_only_its_own_sessions_as_it_named_them(http: TestClient) -> None:
    for session_id in IDS:
        append(http, session_id, f"hello {session_id}", headers=ALICE)
    append(http, "bob-only", "hi", headers=BOB)
    append(http, "会话", "bob's own 会话", headers=BOB)
    assert ids(listed(http, ALICE)) == sorted(IDS)
    assert ids(listed(http, BOB)) == ["bob-only", "会话"]


def test_a_session_says_its_size_and_its_first_and_last_times(http: TestClient) -> None:
    append(http, "会话", "一", "二", headers=ALICE)
    append(http, "会话", "三", headers=ALICE)
    stored = http.get("/v1/sessions/会话/messages", headers=ALICE).json()["data"]
    page = listed(http, ALICE)
    assert page == {
        "object": "list",
        "data": [
            {
                "id": "会话",
                "object": "session",
                "messages": 3,
                "created_at": stored[0]["created_at"],
                "updated_at": stored[-1]["created_at"],
            }
        ],
        "first_id": "会话",
        "last_id": "会话",
        "has_more": False,
    }
    assert stored[0]["created_at"] <= stored[-1]["created_at"]


def test_no_sessions_is_an_empty_list(http: TestClient) -> None:
    page = listed(http, ALICE)
    assert page == {"object": "list", "data": [], "first_id": None, "last_id": None,
                    "has_more": False}  # fmt: skip


@pytest.mark.parametrize("limit", [1, 2, 4, 9, 100])
def test_pages_add_up_to_every_session_in_order(http: TestClient, limit: int) -> None:
    for session_id in IDS:
        append(http, session_id, "x", headers=ALICE)
    append(http, "zzz-bob", "x", headers=BOB)  # after alice's ASCII ids: never on her pages
    assert every_id(http, ALICE, limit) == sorted(IDS)
    first = listed(http, ALICE, limit=limit)
    assert first["has_more"] is (limit < len(IDS))


def test_the_default_page_holds_twenty(http: TestClient) -> None:
    names = [f"s{number:02d}" for number in range(25)]
    for name in names:
        append(http, name, "x", headers=ALICE)
    page = listed(http, ALICE)
    assert (ids(page), page["has_more"]) == (names[:20], True)
    page = listed(http, ALICE, after=page["last_id"])
    assert (ids(page), page["has_more"]) == (names[20:], False)


def test_prefix_searches_ids_in_every_script(http: TestClient) -> None:
    for session_id in IDS:
        append(http, session_id, "x", headers=ALICE)
    append(http, "会话-bob", "x", headers=BOB)
    assert ids(listed(http, ALICE, prefix="user-")) == ["user-1", "user-10", "user-2"]
    assert ids(listed(http, ALICE, prefix="会话")) == ["会话", "会话🎉"]
    assert ids(listed(http, ALICE, prefix="日本")) == ["日本語のセッション"]
    assert ids(listed(http, ALICE, prefix="🎉")) == ["🎉"]
    assert ids(listed(http, ALICE, prefix="nothing")) == []
    assert ids(listed(http, ALICE, prefix="")) == sorted(IDS)
    assert every_id(http, ALICE, 1, prefix="user-") == ["user-1", "user-10", "user-2"]
    page = listed(http, ALICE, prefix="user-", after="user-1", limit=1)
    assert (ids(page), page["has_more"]) == (["user-10"], True)
    assert ids(listed(http, BOB, prefix="会话")) == ["会话-bob"]


def test_a_cursor_need_not_be_a_session_that_still_exists(http: TestClient) -> None:
    for name in ["a", "b", "c", "d"]:
        append(http, name, "x", headers=ALICE)
    page = listed(http, ALICE, limit=2)
    assert http.delete("/v1/sessions/b", headers=ALICE).status_code == 200
    assert ids(listed(http, ALICE, after=page["last_id"])) == ["c", "d"]
    assert ids(listed(http, ALICE, after="bb")) == ["c", "d"]
    assert ids(listed(http, ALICE)) == ["a", "c", "d"]


def test_ids_are_listed_in_nfc_as_the_service_keeps_them(http: TestClient) -> None:
    """``Å`` written as ``A`` + U+030A is the session ``Å`` (see ``tenants.scoped``); a
    prefix or cursor written either way finds it."""
    decomposed = "A\u030angström"
    append(http, decomposed, "x", headers=ALICE)
    composed = unicodedata.normalize("NFC", decomposed)
    assert ids(listed(http, ALICE)) == [composed]
    assert ids(listed(http, ALICE, prefix="A\u030a")) == [composed]
    assert ids(listed(http, ALICE, after="A")) == [composed]


def test_the_services_own_sessions_are_never_listed(opened: Any) -> None:
    """Calibration keeps its ratios in the session ``ctxwindow.calibration``; whatever such
    a session holds, no tenant lists it (an id without the tenant's ``tenant:``)."""

    async def internal() -> None:
        store = opened()  # another process's view of the same data
        note = Entry({"role": "system", "content": "internal"}, tokens=1, seq=0)
        try:
            for session_id in [CALIBRATION, "default", "ctxwindow:x"]:
                await store.append(session_id, [note])
            await store.save_checkpoint(CALIBRATION, 1, b"{}")
        finally:
            await store.close()

    asyncio.run(internal())
    with client(opened, api_keys={}) as http:  # the anonymous tenant, "default"
        append(http, "mine", "x", headers={})
        assert ids(listed(http, {})) == ["mine"]
        assert ids(listed(http, {}, prefix="ctxwindow")) == []


def test_listing_needs_an_api_key_when_keys_are_set(http: TestClient) -> None:
    response = http.get("/v1/sessions")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert http.get("/v1/sessions", headers={"Authorization": "Bearer nope"}).status_code == 401


BAD = [
    ({"limit": 0}, "limit"),
    ({"limit": -1}, "limit"),
    ({"limit": 101}, "limit"),
    ({"limit": "ten"}, "limit"),
    ({"limit": "1.5"}, "limit"),
    ({"limit": ""}, "limit"),
    ({"after": ""}, "after"),
    ({"after": "x" * 201}, "after"),
    ({"after": "a\x01b"}, "after"),
    ({"after": "a\x00"}, "after"),
    ({"prefix": "p\x7f"}, "prefix"),
    ({"prefix": "会" * 201}, "prefix"),
]


@pytest.mark.parametrize(("params", "param"), BAD, ids=[str(p) for p, _ in BAD])
def test_bad_parameters_are_a_400_naming_them(
    http: TestClient, params: dict[str, Any], param: str
) -> None:
    append(http, "s", "x", headers=ALICE)
    response = http.get("/v1/sessions", params=params, headers=ALICE)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert error["message"]


def test_the_openapi_document_describes_the_list(http: TestClient) -> None:
    operation = http.get("/openapi.json").json()["paths"]["/v1/sessions"]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert set(parameters) == {"limit", "after", "prefix"}
    assert parameters["limit"]["schema"]["maximum"] == 100
    assert parameters["limit"]["schema"]["default"] == 20
    assert set(operation["responses"]) == {"200", "400", "401", "503"}
    body = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert body["required"] == ["object", "data", "first_id", "last_id", "has_more"]
    assert operation["security"] == [{"apiKey": []}]


# --- ids hidden in the list: redacted, or hashed (settings.listed_ids) ---------------------

KEY = "a listing key of the deployment 🔑"
PRIVATE = ["alice@example.com", "电话 13812345678", "user-1", "🎉"]


def handle_of(page: dict[str, Any], shown: str) -> str:
    return next(s.get("ref", s["id"]) for s in page["data"] if s["id"] == shown)


def test_hidden_ids_need_a_key() -> None:
    for mode in ("redacted", "hashed"):
        with pytest.raises(ValueError, match="CTXWINDOW_LISTED_IDS_KEY"):
            Settings(listed_ids=mode)
        with pytest.raises(ValueError, match="at least 16"):
            Settings(listed_ids=mode, listed_ids_key="short")


def test_hashed_ids_list_handles_that_open_page_and_delete_the_sessions(opened: Any) -> None:
    with client(opened, listed_ids="hashed", listed_ids_key=KEY) as http:
        for session_id in PRIVATE:
            append(http, session_id, f"hello {session_id}", headers=ALICE)
        append(http, "alice@example.com", "bob's own", headers=BOB)
        response = http.get("/v1/sessions", headers=ALICE)
        assert "alice@" not in response.text and "1381234" not in response.text
        handles = ids(response.json())
        assert len(set(handles)) == len(PRIVATE)
        assert all(re.fullmatch(r"~[0-9a-f]{32}", handle) for handle in handles)
        # Page by page, each page's last handle is the next one's cursor.
        assert sorted(every_id(http, ALICE, limit=1)) == sorted(handles)
        # A handle opens its session: messages, context; another tenant's does not.
        texts = set()
        for handle in handles:
            messages = http.get(f"/v1/sessions/{handle}/messages", headers=ALICE).json()
            texts.add(messages["data"][0]["message"]["content"])
            assert http.get(f"/v1/sessions/{handle}/context", headers=ALICE).status_code == 200
            assert http.get(f"/v1/sessions/{handle}/messages", headers=BOB).status_code == 404
        assert texts == {f"hello {session_id}" for session_id in PRIVATE}
        bobs = ids(listed(http, BOB))
        assert len(bobs) == 1 and bobs[0] not in handles  # the tenant is in the hash
        unknown = "~" + "0" * 32
        assert http.get(f"/v1/sessions/{unknown}/messages", headers=ALICE).status_code == 404

    # Another process with the same key finds a handle it never listed; then deletes by it.
    with client(opened, listed_ids="hashed", listed_ids_key=KEY) as other:
        handle = handles[0]
        assert other.get(f"/v1/sessions/{handle}/messages", headers=ALICE).status_code == 200
        assert other.delete(f"/v1/sessions/{handle}", headers=ALICE).json()["deleted"] is True
        assert len(ids(listed(other, ALICE))) == len(PRIVATE) - 1
    # Another key: other handles, and the old ones open nothing.
    with client(opened, listed_ids="hashed", listed_ids_key=KEY + " rotated") as rotated:
        assert not set(ids(listed(rotated, ALICE))) & set(handles)
        assert rotated.get(f"/v1/sessions/{handles[1]}/messages", headers=ALICE).status_code == 404


def test_redacted_ids_show_what_is_safe_and_open_by_their_handle(opened: Any) -> None:
    with client(opened, listed_ids="redacted", listed_ids_key=KEY) as http:
        for session_id in PRIVATE:
            append(http, session_id, f"hello {session_id}", headers=ALICE)
        page = listed(http, ALICE)
        assert "alice@example.com" not in str(page) and "13812345678" not in str(page)
        shown = sorted(ids(page))
        assert shown == sorted(["[EMAIL]", "电话 [PHONE]", "user-1", "🎉"])
        assert page["last_id"] == page["data"][-1]["ref"]  # the cursor is a handle
        ref = handle_of(page, "[EMAIL]")
        messages = http.get(f"/v1/sessions/{ref}/messages", headers=ALICE).json()
        assert messages["data"][0]["message"]["content"] == "hello alice@example.com"
        # The id itself still works, and appending by the handle adds to that session.
        append(http, ref, "more", headers=ALICE)
        plain = urllib.parse.quote("alice@example.com")
        assert len(http.get(f"/v1/sessions/{plain}/messages", headers=ALICE).json()["data"]) == 2
        assert sorted(every_id(http, ALICE, limit=2)) == shown
