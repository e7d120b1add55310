"""``GET /v1/sessions/{id}/context`` for the inspector (issue 26, item 9): built for the
session's own model and budget, and its rows paged by state.

The session's model and budget are those of its last request through a protocol route
(each turn it stores carries them), so the clients here are the real ``openai`` and
``anthropic`` SDKs; the upstream is a fake that speaks both protocols.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from fastapi.testclient import TestClient

from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.policies.explain import STATES
from ctxwindow.server import Settings, create_app
from tests.support.chat_upstream import FakeUpstream
from tests.support.protocol_upstreams import FakeMessages
from tests.support.sdk_clients import Bridge

CLAUDE = "claude-sonnet-4-5"


class BothProtocols:
    """Chat completions to one fake, Anthropic Messages to the other."""

    def __init__(self) -> None:
        self.chat, self.messages = FakeUpstream(), FakeMessages()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/messages"):
            return self.messages.handle(request)
        return self.chat.handle(request)


def _app(store: str = "memory://", **settings: Any) -> TestClient:
    app = create_app(
        Settings(store=store, upstream="http://upstream.test/v1", archive="off", **settings),
        upstream_transport=httpx.MockTransport(BothProtocols().handle),
    )  # fmt: skip
    return TestClient(app)


@pytest.fixture
def http() -> Iterator[TestClient]:
    with _app() as client:
        yield client


def _openai(http: TestClient) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0
    )


def _anthropic(http: TestClient) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url="http://testserver", api_key="none", max_retries=0,
        http_client=httpx2.Client(transport=Bridge(http), base_url="http://testserver"),
    )  # fmt: skip


def _context(http: TestClient, session: str = "s", **params: Any) -> dict[str, Any]:
    answer = http.get(f"/v1/sessions/{session}/context", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _asked(http: TestClient, session: str = "s") -> dict[str, Any]:
    """The metadata of the session's newest user turn."""
    stored = http.get(f"/v1/sessions/{session}/messages").json()["data"]
    metadata: dict[str, Any] = [e for e in stored if e["message"]["role"] == "user"][-1]["metadata"]
    return metadata


def test_the_context_is_built_for_the_model_and_budget_of_the_last_request(
    http: TestClient,
) -> None:
    _anthropic(http).messages.create(
        model=CLAUDE, max_tokens=1024, system="Answer briefly. 简短回答。",
        messages=[{"role": "user", "content": "Where is parcel D-4? 包裹在哪里 📦"}],
        extra_headers={"X-Session-Id": "s"},
    )  # fmt: skip
    asked = _asked(http)
    assert asked["model"] == CLAUDE
    context = _context(http)
    assert (context["model"], context["model_source"]) == (CLAUDE, "session")
    assert context["report"]["budget"] == asked["budget"]
    assert context["report"]["estimated"] is True
    claude = _context(http, model=CLAUDE)  # named: the model's whole budget
    assert claude["model_source"] == "parameter"
    assert claude["report"]["budget"] > asked["budget"]  # less the reply and the system prompt

    _openai(http).chat.completions.create(
        model="gpt-4o", max_tokens=2000, extra_headers={"X-Session-Id": "s"},
        messages=[{"role": "user", "content": "配達状況を教えてください 🚚"}],
    )  # fmt: skip
    context = _context(http)
    assert (context["model"], context["model_source"]) == ("gpt-4o", "session")
    assert context["report"]["budget"] == _asked(http)["budget"]
    assert context["report"]["budget"] == _context(http, model="gpt-4o")["report"]["budget"] - 2000
    assert context["report"]["estimated"] is False
    assert _context(http, max_tokens=300)["report"]["budget"] == 300  # the session's model


def test_a_session_no_request_named_a_model_is_built_for_the_default(http: TestClient) -> None:
    turns = [{"role": "user", "content": "Invoice 7 is wrong 🧾"}]
    assert http.post("/v1/sessions/a/messages", json={"messages": turns}).status_code == 200
    context = _context(http, "a")
    assert (context["model"], context["model_source"]) == ("gpt-4o", "default")


def test_a_model_the_service_no_longer_knows_is_a_400_naming_it(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    acme = {"acme-7b": {"context_window": 8192, "estimate": True}}
    with _app(store, models=acme) as http:
        _openai(http).chat.completions.create(
            model="acme-7b", messages=[{"role": "user", "content": "Hallo 👋"}],
            extra_headers={"X-Session-Id": "s"},
        )  # fmt: skip
        assert _context(http)["model"] == "acme-7b"
    with _app(store) as http:  # restarted without the entry
        answer = http.get("/v1/sessions/s/context")
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["param"] == "model" and "'acme-7b'" in error["message"]
        assert _context(http, model="gpt-4o")["model_source"] == "parameter"


def test_a_bad_state_is_a_400_naming_the_parameter(http: TestClient) -> None:
    turns = [{"role": "user", "content": "Hei 👋"}]
    http.post("/v1/sessions/s/messages", json={"messages": turns})
    answer = http.get("/v1/sessions/s/context", params={"state": "lost"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "state" and "'evicted'" in error["message"]


def _fill(http: TestClient) -> None:
    """A session whose rows take every state: a system prompt, a summary, turns kept,
    folded and evicted, a tool result too large (compressed), a turn recalled."""

    def append(*messages: dict[str, Any]) -> None:
        answer = http.post("/v1/sessions/r/messages", json={"messages": list(messages)})
        assert answer.status_code == 200, answer.text

    append({"role": "system", "content": "You are the support agent of Nordlys Freight."})
    append({"role": "user", "content": "The gate code for the warehouse in Tromsø is 4471."},
           {"role": "assistant", "content": "Noted: 4471."})  # fmt: skip
    for i in range(30):
        append(
            {"role": "user", "content": f"Log shipment {i}: {i} pallets of tiles, 易碎."},
            {"role": "assistant", "content": f"Logged shipment {i} 📦 to depot {i % 5}."},
        )
        assert http.get("/v1/sessions/r/context").status_code == 200  # the window steps
    call = {"id": "call_1", "type": "function",
            "function": {"name": "scans", "arguments": '{"order": "D-4"}'}}  # fmt: skip
    scans = [
        {"at": f"06:{m:02d}", "where": f"dock {m % 4}", "by": f"scanner-{m}"} for m in range(60)
    ]
    append({"role": "user", "content": "Every scan of D-4 today?"},
           {"role": "assistant", "content": None, "tool_calls": [call]},
           {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"scans": scans})},
           {"role": "assistant", "content": "Sixty scans, all at the docks."})  # fmt: skip


def _pages(http: TestClient, limit: int, **params: Any) -> list[dict[str, Any]]:
    """Every page of the rows, as the inspector turns them: the next starts after the
    highest seq of the last."""
    pages, after = [], 0
    while True:
        page = _context(http, "r", limit=limit, after=after, **params)
        pages.append(page)
        seqs = [row["seq"] for row in page["report"]["decisions"] if row["seq"] is not None]
        if not page["has_more"]:
            return pages
        after = max(seqs)


def test_paging_by_state_gives_exactly_the_rows_of_that_state() -> None:
    archive = SQLiteArchive()
    app = create_app(
        Settings(store="memory://", upstream="http://upstream.test/v1", budget_ratio=0.004),
        upstream_transport=FakeUpstream().transport(), archive=archive,
    )  # fmt: skip
    query = {"query": "What is the gate code for the Tromsø warehouse?"}
    with TestClient(app) as http:
        _fill(http)
        whole = _context(http, "r", **query)["report"]
        rows = whole["decisions"]
        assert {row["state"] for row in rows} == set(STATES), "a state no row has"
        for state in STATES:
            pages = _pages(http, 3, state=state, **query)
            shown = [row for page in pages for row in page["report"]["decisions"]]
            assert shown == [row for row in rows if row["state"] == state], state
            for page in pages:  # the totals stay the whole session's
                assert page["report"]["messages_by_state"] == whole["messages_by_state"]
                assert page["report"]["evicted_entries"] == whole["evicted_entries"]
        unfiltered = _pages(http, 7, **query)
        assert [row for page in unfiltered for row in page["report"]["decisions"]] == rows
    archive.close()


def test_the_stable_end_names_the_last_row_of_the_stable_prefix(http: TestClient) -> None:
    for i in range(4):
        _openai(http).chat.completions.create(
            model="gpt-4o", extra_headers={"X-Session-Id": "s"},
            messages=[{"role": "user", "content": f"Parcel {i} 📦: where is it?"}],
        )  # fmt: skip
    context = _context(http)
    report = context["report"]
    inside = [row for row in report["decisions"] if row["state"] in ("pinned", "kept")]
    assert report["stable_messages"] == len(context["messages"]) == len(inside)
    assert context["stable_end"] == inside[-1]["id"]
