"""The inspector on a long Claude session, in a real headless browser (issue 26, item 9).

A live service (a 3,000-token budget for Claude models, the default for the others)
holds a session of 447 messages: 444 appended through the sessions API, then one
turn through the real ``anthropic`` SDK, so that its last request was Claude's.
The page must open it at Claude's model, its estimated counts and the budget
that request had; draw one page of rows at a time (the page's height bounded),
page to the last rows and back, and filter the rows by state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from ctxwindow.server import Settings, create_app
from tests.support.browser import screenshot
from tests.support.inspector import Inspector
from tests.support.live_server import serving
from tests.support.protocol_upstreams import FakeMessages

SESSION = "claude-long"
CLAUDE = "claude-sonnet-4-5"
BUDGET = 3000  # Claude's, in the settings
ROWS = 100  # rows of the table a page (inspector.js)
TURNS = 222  # appended user/assistant pairs, after the system prompt
LONG = " ".join(f"Step {i}: tighten bolt {i} of the 配電盤 to {i + 10} Nm." for i in range(30))
QUESTION = "Where is parcel D-7 now? 包裹 D-7 在哪里？ 📦"


def _history() -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": "You are the dispatcher of Nordlys Freight 👋."}]
    for i in range(1, TURNS + 1):
        extra = f" The manual: {LONG}" if i % 40 == 0 else ""
        messages += [
            {"role": "user", "content": f"Turn {i}: where is parcel D-{i}? 包裹 D-{i} 在哪里？"
                                        f" 配達状況は？ 📦{extra}"},
            {"role": "assistant", "content": f"Parcel D-{i} left depot {i % 7} 🚚 (第{i}号)."},
        ]  # fmt: skip
    return messages


@pytest.fixture(scope="module")
def live() -> Iterator[str]:
    settings = Settings(
        store="memory://", upstream="http://upstream.test/v1", archive="off",
        budgets={"*claude-*": BUDGET},
    )  # fmt: skip
    app = create_app(settings, upstream_transport=FakeMessages().transport())
    with serving(app) as base_url:
        history = _history()
        with httpx.Client(base_url=base_url, timeout=60) as http:
            for start in range(0, len(history), 100):
                answer = http.post(f"/v1/sessions/{SESSION}/messages",
                                   json={"messages": history[start : start + 100]})  # fmt: skip
                assert answer.status_code == 200, answer.text
        client = anthropic.Anthropic(base_url=base_url, api_key="none", max_retries=0)
        client.messages.create(
            model=CLAUDE, max_tokens=256, messages=[{"role": "user", "content": QUESTION}],
            extra_headers={"X-Session-Id": SESSION},
        )  # fmt: skip
        yield base_url


@pytest.fixture
def inspector(browser: Any, live: str) -> Iterator[Inspector]:
    opened = Inspector(browser, live)
    yield opened
    opened.page.context.close()


def _api(base_url: str, path: str, **params: Any) -> Any:
    answer = httpx.get(f"{base_url}/v1/sessions/{SESSION}/{path}", params=params, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _stored(base_url: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = _api(base_url, "messages")["data"]
    return data


def _open(inspector: Inspector) -> Any:
    page = inspector.open(f"#s={SESSION}")
    page.locator("#timeline tbody tr[data-id]").first.wait_for()
    return page


def _summary(page: Any) -> dict[str, str]:
    pairs = page.eval_on_selector_all(
        "#summary div", "divs => divs.map(d => [d.querySelector('dt').textContent,"
        " d.querySelector('dd').textContent])",
    )  # fmt: skip
    return dict(pairs)


def _shown(page: Any) -> list[tuple[str, str]]:
    """The table's rows: (message id, state), in order."""
    rows: list[list[str]] = page.eval_on_selector_all(
        "#timeline tbody tr[data-id]", "trs => trs.map(tr => [tr.dataset.id, tr.dataset.state])"
    )
    return [(i, s) for i, s in rows]


def _turn(page: Any, button: str) -> list[tuple[str, str]]:
    """Click ``button`` and wait for the table to change; the new page's rows."""
    before = _shown(page)
    page.get_by_role("button", name=button).click()
    page.wait_for_function(
        "first => document.querySelector('#timeline tbody tr[data-id]')?.dataset.id !== first",
        arg=before[0][0],
    )
    page.wait_for_function("() => !document.querySelector('#session-status')"
                           ".textContent.startsWith('Building')")  # fmt: skip
    return _shown(page)


def test_the_session_is_long_and_its_last_request_was_claudes(live: str) -> None:
    stored = _stored(live)
    assert len(stored) == 1 + 2 * TURNS + 2 >= 445
    asked = stored[-2]
    assert asked["message"]["content"] == QUESTION
    assert asked["metadata"]["model"] == CLAUDE
    # the room the request's context had: Claude's budget less what is sent beside it
    assert BUDGET - 50 < asked["metadata"]["budget"] <= BUDGET


def test_a_claude_session_opens_at_its_model_with_estimated_counts_and_its_budget(
    inspector: Inspector, live: str
) -> None:
    budget = _stored(live)[-2]["metadata"]["budget"]  # the last request's
    page = _open(inspector)
    summary = _summary(page)
    assert summary["Model"] == f"{CLAUDE} (the session's last request)"
    assert summary["Counts"].startswith("estimated")
    assert summary["Budget"] == f"{budget:,} tokens"
    assert page.get_by_label("Model").input_value() == CLAUDE
    assert page.get_by_label("Budget (max tokens, optional)").input_value() == str(budget)
    gpt = _api(live, "context", model="gpt-4o", limit=1)["report"]
    assert gpt["budget"] != budget and gpt["estimated"] is False  # what it showed before
    assert f"for {CLAUDE}" in page.locator("#session-status").text_content()

    page.get_by_label("Model").fill("gpt-4o")  # another model: its own budget asked for
    page.get_by_label("Budget (max tokens, optional)").fill("")
    page.get_by_role("button", name="Rebuild the context").click()
    page.locator("#summary").get_by_text("gpt-4o (chosen above)").wait_for()
    assert _summary(page)["Counts"] == "exact"
    assert _summary(page)["Budget"] == f"{gpt['budget']:,} tokens"
    inspector.check()


def test_a_long_session_draws_one_page_of_rows_and_pages_to_its_last_rows(
    inspector: Inspector, live: str
) -> None:
    stored = _stored(live)
    page = _open(inspector)
    first = _shown(page)
    assert len(first) <= ROWS + 1  # a page, and the rolling summary's row (not stored)
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 15_000, f"the page is {height} pixels high"  # all rows: over 30,000
    assert page.get_by_role("button", name="Previous page").is_disabled()
    screenshot(page, "inspector-long", full_page=True)

    pages = [first]
    while page.get_by_role("button", name="Next page").is_enabled():
        pages.append(_turn(page, "Next page"))
        assert len(pages[-1]) <= ROWS
        assert page.locator("#timeline tr.stable-end").count() <= 1
    assert len(pages) == 5
    ids = [i for rows in pages for i, _ in rows]
    stored_ids = [e["id"] for e in stored]
    assert [i for i in ids if i in set(stored_ids)] == stored_ids  # each once, in order
    assert pages[-1][-1][0] == stored[-1]["id"]  # the Claude reply, on the last page
    assert "(the last page)" in page.locator("#rows-status").text_content()
    last_text = page.locator("#timeline tbody tr[data-id]").last.text_content()
    assert "It left the Leeds depot this morning." in last_text

    assert _turn(page, "Previous page") == pages[-2]
    assert _turn(page, "First page") == first
    inspector.check()


@pytest.mark.parametrize("state", ["kept", "summarized", "evicted"])
def test_the_state_filter_shows_only_rows_of_that_state(
    inspector: Inspector, live: str, state: str
) -> None:
    page = _open(inspector)
    expected = _api(live, "context", state=state, limit=ROWS)
    assert expected["report"]["decisions"], f"no {state} rows to filter"
    page.get_by_label("Show the messages").select_option(state)
    page.wait_for_function(
        "state => [...document.querySelectorAll('#timeline tbody tr[data-id]')]"
        ".every(tr => tr.dataset.state === state)", arg=state,
    )  # fmt: skip
    shown = _shown(page)
    assert shown == [(d["id"], state) for d in expected["report"]["decisions"]]
    status = page.locator("#rows-status").text_content()
    assert f"of {expected['report']['messages_by_state'][state]:,} {state} messages" in status
    if expected["has_more"]:  # the filter pages too
        following = _turn(page, "Next page")
        assert following and {s for _, s in following} == {state}
        assert not {i for i, _ in following} & {i for i, _ in shown}
    inspector.check()


def test_a_filtered_row_reads_its_whole_message_when_opened(
    inspector: Inspector, live: str
) -> None:
    """The rows of a state come without their messages: a long one is read when opened."""
    page = _open(inspector)
    page.get_by_label("Show the messages").select_option("evicted")
    row = page.locator("#timeline tbody tr[data-state=evicted]").filter(has=page.locator("details"))
    row.first.wait_for()
    message_id = row.first.get_attribute("data-id")
    row.first.locator("summary").click()
    text = row.first.locator("pre")
    page.wait_for_function(
        "pre => !pre.textContent.startsWith('Reading')", arg=text.element_handle()
    )
    whole = next(e for e in _stored(live) if e["id"] == message_id)["message"]["content"]
    assert text.text_content() == whole and LONG in whole
    inspector.check()


def test_a_bad_state_in_the_address_of_the_api_is_a_400(live: str) -> None:
    answer = httpx.get(f"{live}/v1/sessions/{SESSION}/context", params={"state": "lost"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "state" and "'evicted'" in error["message"]
