"""The session inspector (``/ui/``) in a real headless browser, against a live service.

One service (three tenants, a 512-token window, recall on) is filled through the
sessions API and shared by the browser tests; every page blocks requests that
leave it and fails on any it saw, and on any error the page threw or logged.
"""

from __future__ import annotations

import json
import re
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from tests.support.inspector import Inspector

from .support.browser import screenshot
from .support.live_server import serving

KEYS = {"key-a": "alice", "key-b": "bob", "key-c": "carol"}
ALICE = {"Authorization": "Bearer key-a"}
BOB = {"Authorization": "Bearer key-b"}
MANY = 57  # carol's sessions: more than the page's 50 a page
SCRIPT = '<script>window.__injected = 1</script><img src="x" onerror="window.__injected = 2">'
GATE = "The gate code for the warehouse in Tromsø is 4471."
CJK = "我的包裹在哪里？订单号 D-4。配達状況を教えてください 🙏📦"
MANUAL = "Here is the loading manual. " + " ".join(
    f"Step {i}: tighten bolt {i} of the 配電盤 to {i + 10} Nm, then check the seal."
    for i in range(40)
)


def _upstream(request: httpx.Request) -> httpx.Response:
    """The inspector never calls the model; only the readiness probe would."""
    return httpx.Response(200, json={"data": []})


def _settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "store": "memory://", "upstream": "http://upstream.test/v1", "api_keys": KEYS,
        "budget_ratio": 0.004,  # gpt-4o: a window of 512 tokens
    }  # fmt: skip
    return Settings(**{**base, **overrides})


def _app(**overrides: Any) -> Any:
    return create_app(_settings(**overrides), upstream_transport=httpx.MockTransport(_upstream))


def _conversation() -> list[list[dict[str, Any]]]:
    """The appends of the long session: a gate code, an account, a manual, CJK, tool calls,
    a script, shipments enough for a 512-token window to summarize the old turns, and a tool
    result too large for the window, compressed."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "track_parcel", "arguments": '{"order": "D-4"}'}}  # fmt: skip
    turns: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": "You are the support agent of Nordlys Freight."}],
        [{"role": "user", "content": GATE}, {"role": "assistant", "content": "Noted: 4471."}],
        [{"role": "user", "content": "Invoices go to account ACC-778812, attention Ms Halvorsen."},
         {"role": "assistant", "content": "Noted: ACC-778812."}],
        [{"role": "user", "content": MANUAL}, {"role": "assistant", "content": "Manual read."}],
        [{"role": "user", "content": CJK},
         {"role": "assistant", "content": None, "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "call_1",
          "content": json.dumps({"order": "D-4", "status": "在途", "depot": "Oslo"})},
         {"role": "assistant", "content": "包裹 D-4 今天早上离开了奥斯陆仓库 🚚"}],
        [{"role": "user", "content": SCRIPT},
         {"role": "assistant", "content": "That reads as markup; I only see it as text."}],
    ]  # fmt: skip
    for i in range(14):
        turns.append(
            [{"role": "user", "content": f"Log shipment {i}: {i} pallets of ceramic tiles."},
             {"role": "assistant", "content": f"Logged shipment {i} to depot {i % 5} 🚚."}]
        )  # fmt: skip
    scans = [
        {"at": f"06:{m:02d}", "where": f"dock {m % 4}", "by": f"scanner-{m}"} for m in range(60)
    ]
    turns.append(
        [{"role": "user", "content": "Every scan of D-4 today?"},
         {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "call_2"}]},
         {"role": "tool", "tool_call_id": "call_2", "content": json.dumps({"scans": scans})},
         {"role": "assistant", "content": "Sixty scans, all at the docks."}]
    )  # fmt: skip
    return turns


def _fill(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        for messages in _conversation():
            answer = http.post("/v1/sessions/support-42/messages", headers=ALICE,
                               json={"messages": messages})  # fmt: skip
            assert answer.status_code == 200, answer.text
            # a chat builds a context at each turn: the window steps as it would in use
            assert http.get("/v1/sessions/support-42/context", headers=ALICE).status_code == 200
        short = [{"role": "user", "content": "Invoice 7 is wrong 🧾"}]
        for sid, key in [("support-43", ALICE), ("billing-7", ALICE), ("bob-private", BOB)]:
            answer = http.post(f"/v1/sessions/{sid}/messages", headers=key,
                               json={"messages": short})  # fmt: skip
            assert answer.status_code == 200, answer.text
        for i in range(MANY):  # more than a page of the list
            answer = http.post(f"/v1/sessions/c-{i:03d}/messages", json={"messages": short},
                               headers={"Authorization": "Bearer key-c"})  # fmt: skip
            assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def live() -> Iterator[str]:
    """The filled service's base URL."""
    with serving(_app()) as base_url:
        _fill(base_url)
        yield base_url


def _context(base_url: str, **params: Any) -> dict[str, Any]:
    answer = httpx.get(
        f"{base_url}/v1/sessions/support-42/context", headers=ALICE, params=params, timeout=30
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


@pytest.fixture
def open_inspector(browser: Any, live: str) -> Iterator[Callable[..., Inspector]]:
    """Opens inspector pages on the live service (``open_inspector(key=...)``); closed after the
    test, whatever became of it."""
    opened: list[Inspector] = []

    def open_one(key: str | None = None) -> Inspector:
        opened.append(Inspector(browser, live, key))
        return opened[-1]

    yield open_one
    for inspector in opened:
        inspector.page.context.close()


def _rows(page: Any) -> dict[str, dict[str, str]]:
    """The timeline's rows by message id: state and the text of each cell."""
    rows = page.eval_on_selector_all(
        "#timeline tbody tr[data-id]",
        """trs => trs.map(tr => ({id: tr.dataset.id, state: tr.dataset.state,
            cells: [...tr.cells].map(td => td.textContent)}))""",
    )
    return {r["id"]: {"state": r["state"], "reason": r["cells"][3], "seq": r["cells"][0],
                      "tokens": r["cells"][4], "text": r["cells"][7]} for r in rows}  # fmt: skip


def _session_ids(page: Any) -> list[str]:
    ids: list[str] = page.eval_on_selector_all("#sessions a", "as => as.map(a => a.dataset.id)")
    return ids


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# --- the files, without a browser ---------------------------------------------------------


def test_the_page_is_served_without_a_key_with_types_and_cache_headers() -> None:
    """The files hold no data: open even with api_keys; each has its type, an ETag and
    no-cache, a 304 when unchanged, and a policy that lets it load only from the service."""
    with TestClient(_app()) as http:
        moved = http.get("/ui", follow_redirects=False)
        assert moved.status_code == 308 and moved.headers["location"] == "ui/"
        for path, kind in [("/ui/", "text/html"), ("/ui/inspector.js", "text/javascript"),
                           ("/ui/inspector.css", "text/css")]:  # fmt: skip
            answer = http.get(path)
            assert answer.status_code == 200
            assert answer.headers["content-type"] == f"{kind}; charset=utf-8"
            assert answer.headers["cache-control"] == "no-cache"
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert "default-src 'none'" in answer.headers["content-security-policy"]
            again = http.get(path, headers={"If-None-Match": answer.headers["etag"]})
            assert again.status_code == 304 and again.content == b""
            text = answer.text.replace("http://www.w3.org/2000/svg", "")  # a name, not a load
            assert "http://" not in text and "https://" not in text and "//cdn" not in text
        assert http.get("/ui/index.html").status_code == 404
        assert http.get("/ui/secrets.txt").status_code == 404
        assert http.get("/v1/sessions/x/messages").status_code == 401  # the API still asks
        assert not [p for p in http.get("/openapi.json").json()["paths"] if p.startswith("/ui")]


def test_the_model_field_starts_empty_as_the_context_route_names_no_model() -> None:
    """Without a model the context route builds for the session's own: the page's field
    starts empty (it is filled from the route's answer, see test_inspector_pages.py)."""
    with TestClient(_app()) as http:
        document = http.get("/openapi.json").json()
        page = http.get("/ui/").text
    parameters = document["paths"]["/v1/sessions/{session_id}/context"]["get"]["parameters"]
    model = next(p for p in parameters if p["name"] == "model")
    assert model["schema"].get("default") is None and not model["required"]
    field = re.search(r'<input id="model"[^>]*>', page)
    assert field is not None and "value=" not in field.group(0)


def test_with_ui_off_every_ui_path_is_404() -> None:
    with TestClient(_app(ui=False)) as http:
        for path in ("/ui", "/ui/", "/ui/inspector.js", "/ui/inspector.css"):
            assert http.get(path, follow_redirects=False).status_code == 404
        assert http.get("/healthz").status_code == 200


def test_the_ui_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWINDOW_UI", "false")
    assert Settings(store="memory://").ui is False
    monkeypatch.delenv("CTXWINDOW_UI")
    assert Settings(store="memory://").ui is True


# --- in the browser ------------------------------------------------------------------------


def test_the_key_form_appears_on_401_and_its_key_lists_the_tenants_sessions(
    open_inspector: Any, live: str
) -> None:
    inspector = open_inspector()
    page = inspector.open()
    form = page.get_by_label("API key", exact=True)
    form.wait_for()
    assert page.get_by_role("heading", name="API key needed").is_visible()
    assert "API key is needed" in page.locator("#sessions-status").text_content()
    screenshot(page, "inspector-key")

    form.fill("not-a-key")
    page.get_by_role("button", name="Use this key").click()
    page.get_by_text("refused this key").wait_for()

    form.fill("key-a")
    form.press("Enter")
    page.locator("#sessions a").first.wait_for()
    assert page.locator("#key-panel").is_hidden()
    assert sorted(_session_ids(page)) == ["billing-7", "support-42", "support-43"]
    assert page.evaluate("sessionStorage.getItem('ctxwindow.api-key')") == "key-a"
    inspector.check(401)


def test_a_tenant_sees_only_its_own_sessions(open_inspector: Any, live: str) -> None:
    inspector = open_inspector(key="key-b")
    page = inspector.open()
    page.locator("#sessions a").first.wait_for()
    assert _session_ids(page) == ["bob-private"]
    page.goto(f"{live}/ui/#s=support-42")  # alice's session, by its id: not bob's to see
    page.get_by_text("answered 404").wait_for()
    assert page.locator("#timeline tbody tr").count() == 0
    inspector.check(404)


def test_search_narrows_the_list_by_prefix(open_inspector: Any, live: str) -> None:
    inspector = open_inspector(key="key-a")
    page = inspector.open()
    page.locator("#sessions a").first.wait_for()
    page.get_by_label("Session id starts with").fill("support")
    page.get_by_label("Session id starts with").press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#sessions a').length === 2")
    assert sorted(_session_ids(page)) == ["support-42", "support-43"]
    assert "starts with “support”" in page.locator("#sessions-status").text_content()
    page.get_by_label("Session id starts with").fill("nothing-like-it")
    page.get_by_text("No sessions whose id starts with").wait_for()
    inspector.check()


def test_more_sessions_loads_the_next_page(open_inspector: Any, live: str) -> None:
    inspector = open_inspector(key="key-c")
    page = inspector.open()
    page.locator("#sessions a").first.wait_for()
    assert len(_session_ids(page)) == 50
    assert "more to load" in page.locator("#sessions-status").text_content()
    page.get_by_role("button", name="More sessions").click()
    page.wait_for_function(f"() => document.querySelectorAll('#sessions a').length === {MANY}")
    assert _session_ids(page) == [f"c-{i:03d}" for i in range(MANY)]
    assert page.get_by_role("button", name="More sessions").is_hidden()
    inspector.check()


def test_keyboard_reaches_search_and_a_session_and_enter_opens_it(
    open_inspector: Any, live: str
) -> None:
    inspector = open_inspector(key="key-a")
    page = inspector.open()
    page.locator("#sessions a").first.wait_for()
    focused = _tab_until(page, "document.activeElement.id === 'search'")
    assert focused, "Tab never reached the search box"
    assert _tab_until(page, "document.activeElement.dataset.id === 'support-42'")
    page.keyboard.press("Enter")
    page.locator("#timeline tbody tr[data-id]").first.wait_for()
    assert page.locator("#session-heading").text_content() == "Session support-42"
    assert page.evaluate("document.activeElement.id") == "session"  # focus follows
    inspector.check()


def _tab_until(page: Any, condition: str, presses: int = 30) -> bool:
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate(condition):
            return True
    return False


def test_a_session_shows_every_stored_message_with_the_reports_state_and_reason(
    open_inspector: Any, live: str
) -> None:
    inspector = open_inspector(key="key-a")
    page = inspector.open("#s=support-42")
    page.locator("#timeline tbody tr[data-id]").first.wait_for()
    shown = _rows(page)
    stored = httpx.get(f"{live}/v1/sessions/support-42/messages", headers=ALICE).json()["data"]
    report = _context(live)["report"]
    rows = {row["id"]: row for row in report["decisions"]}
    stored_ids = {e["id"] for e in stored}
    assert [i for i in shown if i in stored_ids] == [e["id"] for e in stored]  # all, in order
    for entry in stored:
        row, cell = rows[entry["id"]], shown[entry["id"]]
        assert cell["state"] == row["state"], entry
        assert row["reason"] in cell["reason"]
        assert cell["seq"] == str(entry["seq"])
        assert str(row["stored_tokens"]) in cell["tokens"].replace(",", "")
    states = {cell["state"] for cell in shown.values()}
    assert {"pinned", "kept", "compressed", "summarized"} <= states
    compressed = next(c for c in shown.values() if c["state"] == "compressed")
    assert "→" in compressed["tokens"] and "by structured" in compressed["reason"]
    assert page.locator("#timeline tr.stable-end").count() == 1
    before = page.eval_on_selector_all(
        "#timeline tbody tr",
        """trs => trs.slice(0, trs.findIndex(tr => tr.classList.contains('stable-end')))
            .filter(tr => ['pinned', 'kept', 'compressed', 'recalled'].includes(tr.dataset.state))
            .map(tr => tr.cells[1].textContent)""",
    )
    context = _context(live)
    assert len(before) == report["stable_messages"]  # the line is where the prefix ends
    assert before == [m["role"] for m in context["messages"][: len(before)]]  # context order
    last_step = report["last_step"] or "none yet"
    assert page.locator("#summary").get_by_text(last_step).is_visible()
    inspector.check()


def test_charts_text_and_a_script_message_render_as_text(open_inspector: Any, live: str) -> None:
    inspector = open_inspector(key="key-a")
    page = inspector.open("#s=support-42")
    page.locator("#timeline tbody tr[data-id]").first.wait_for()
    for name in ("Tokens by category", "Tokens over turns"):
        chart = page.get_by_role("img", name=name)
        assert chart.evaluate("svg => svg.querySelector('title').textContent") == name
        assert chart.locator("text").count() >= 4
    assert page.locator("#over-turns").get_by_text("seq of the stored message").count() == 1
    assert page.locator("#by-category text").get_by_text("headroom", exact=True).count() == 1

    for text in ("包裹 D-4 今天早上离开了奥斯陆仓库 🚚", "配達状況を教えてください"):
        box = page.get_by_text(text).first.bounding_box()
        assert box is not None and box["width"] > 0 and box["height"] > 0
    cell = page.locator("#timeline td").filter(has_text="<script>window.__injected")
    assert cell.count() == 1 and SCRIPT in cell.text_content()
    assert page.evaluate("window.__injected") is None
    assert page.locator("#timeline script, #timeline img").count() == 0

    page.locator("details summary").first.click()  # a long message opens whole
    assert MANUAL[-40:] in page.locator("details[open] pre").first.text_content()
    data = screenshot(page, "inspector", full_page=True)
    width, height = _png_size(data)
    assert width >= 1280 and height > 900 and len(data) > 50_000
    inspector.check()


def test_rebuild_with_a_query_and_a_budget(open_inspector: Any, live: str) -> None:
    """The form's model, budget and query go to the context route; a query recalls."""
    _wait_for_recall(live)
    inspector = open_inspector(key="key-a")
    page = inspector.open("#s=support-42")
    page.locator("#timeline tbody tr[data-id]").first.wait_for()
    page.get_by_label("Budget (max tokens, optional)").fill("400")
    page.get_by_label("Query for recall (optional)").fill("gate code Tromsø warehouse")
    page.get_by_role("button", name="Rebuild the context").click()
    page.locator("#summary").get_by_text("400 tokens").first.wait_for()
    page.locator('#timeline tr[data-state="recalled"]').first.wait_for()
    assert page.locator('#timeline tr[data-state="evicted"]').count() > 0  # the narrower budget
    expected = _context(live, max_tokens=400, query="gate code Tromsø warehouse")["report"]
    shown = _rows(page)
    for row in expected["decisions"]:
        if row["id"] in shown:
            assert shown[row["id"]]["state"] == row["state"]
    assert GATE in page.locator('#timeline tr[data-state="recalled"]').all_text_contents()[0]
    screenshot(page, "inspector-recall", full_page=True)

    page.get_by_label("Model").fill("no-such-model")
    page.get_by_role("button", name="Rebuild the context").click()
    page.get_by_text("answered 400").wait_for()  # the service's words, the form kept
    assert page.get_by_label("Model").is_visible()
    assert page.locator("#timeline tbody tr").count() == 0  # nothing stale under the error
    inspector.check(400)


def _wait_for_recall(base_url: str) -> None:
    """The archive indexes evicted turns in the background: wait until the gate code can be
    recalled (through the API, as the page will ask)."""
    deadline = time.monotonic() + 20
    while _context(base_url, query="gate code Tromsø warehouse")["report"]["recalled_entries"] == 0:
        assert time.monotonic() < deadline, "the archive never recalled the gate code"
        time.sleep(0.1)


CONTRAST = """() => {
  const channel = (c) => {
    c /= 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  };
  const luminance = (rgb) => {
    const [r, g, b] = rgb.match(/[\\d.]+/g).map(Number);
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  };
  const background = (node) => {
    for (; node; node = node.parentElement) {
      const colour = getComputedStyle(node).backgroundColor;
      if (!/rgba\\(.*, 0\\)$/.test(colour) && colour !== "transparent") return colour;
    }
    return "rgb(255, 255, 255)";
  };
  const low = [];
  const nodes = document.querySelectorAll("body *:not(script):not(style)");
  for (const node of nodes) {
    const own = [...node.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim());
    if (!own || !node.getClientRects().length) continue;
    const style = getComputedStyle(node);
    const colour = node instanceof SVGElement ? style.fill : style.color;
    const [a, b] = [luminance(colour), luminance(background(node))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const text = node.textContent.trim().slice(0, 30);
    if (ratio < 4.5) low.push(`${node.tagName} "${text}" ${ratio.toFixed(2)}`);
  }
  return low;
}"""


def test_every_control_is_labelled_and_all_text_has_contrast(
    open_inspector: Any, live: str
) -> None:
    """WCAG AA: 4.5:1 for every piece of text shown, the charts' included; every input has
    a label, every button a name; the landmarks and headings are there."""
    inspector = open_inspector(key="key-a")
    page = inspector.open("#s=support-42")
    page.locator("#timeline tbody tr[data-id]").first.wait_for()
    page.locator("details summary").first.click()
    assert page.evaluate(CONTRAST) == []
    unlabelled = page.eval_on_selector_all(
        "input, button, select, textarea",
        "els => els.filter(e => e.type !== 'hidden' && !(e.labels?.length || e.textContent.trim()"
        " || e.getAttribute('aria-label'))).map(e => e.outerHTML)",
    )
    assert unlabelled == []
    for role, name in [("banner", None), ("navigation", "Sessions"), ("main", "Session support-42"),
                       ("search", None)]:  # fmt: skip
        assert page.get_by_role(role, name=name).count() == 1, role
    assert page.get_by_role("heading", level=1).text_content() == "Session inspector"
    inspector.check()


def test_redacted_ids_are_listed_redacted_and_open_by_their_handle(browser: Any) -> None:
    """With ``listed_ids="redacted"`` the list shows ``[EMAIL]``, never the address, and a
    click opens the session by its handle."""
    app = _app(listed_ids="redacted", listed_ids_key="a listing key of the deployment")
    with serving(app) as base_url:
        with httpx.Client(base_url=base_url, timeout=30) as http:
            body = {"messages": [{"role": "user", "content": "Where is parcel 7? 📦"}]}
            answer = http.post("/v1/sessions/ola@example.no/messages", headers=ALICE, json=body)
            assert answer.status_code == 200, answer.text
        inspector = Inspector(browser, base_url, "key-a")
        try:
            page = inspector.open()
            page.locator("#sessions a").first.wait_for()
            assert page.locator("#sessions .session-id").all_text_contents() == ["[EMAIL]"]
            assert "ola@example.no" not in page.content()
            (handle,) = _session_ids(page)
            assert re.fullmatch(r"~[0-9a-f]{32}", handle)
            page.locator("#sessions a").first.click()
            page.get_by_text("Where is parcel 7? 📦").first.wait_for()
            assert page.url.endswith(f"#s={handle}")
            inspector.check()
        finally:
            inspector.page.context.close()
