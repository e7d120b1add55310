"""Save the README's pictures: docs/images/inspector.png and docs/images/report.png.

    python tools/screenshots.py [inspector] [report] [--out docs/images]

The report is that of ``make demo`` (the built-in datasets, four budgets).
The inspector shows a demo support conversation:

Starts the service in this process (memory store, no upstream: the demo
session is filled through the sessions API), with a 512-token window so that
the messages' states vary: pinned, kept, compressed, summarized, evicted and,
after a question about an old turn, recalled. Then opens ``/ui/`` in headless
chromium (``tools/install-browser``; Playwright from the ``test`` extra) and
saves a screenshot of the page. Nothing is fetched from the network.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' browser and live server

from tests.support.browser import CHROMIUM, FLAGS  # noqa: E402
from tests.support.live_server import serving  # noqa: E402

from ctxwindow.server import Settings, create_app  # noqa: E402

SESSION = "ticket-8841"
KEY = "demo-key"
QUERY = "Which door code did the customer give for the Bergen warehouse?"


def call(name: str, arguments: dict[str, Any], number: int) -> dict[str, Any]:
    return {"id": f"call_{number}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip


def conversation() -> list[list[dict[str, Any]]]:
    """The appends of a support ticket: a door code early on, parcel look-ups through
    tools, a long returns policy, a customer writing in Chinese and Japanese."""
    tracking = {"order": "NF-2291", "status": "in transit", "depot": "Oslo",
                "events": [{"at": f"2024-05-0{d}T0{d}:00Z", "where": w} for d, w in
                           [(1, "Bergen"), (2, "Voss"), (3, "Gol"), (4, "Oslo")]]}  # fmt: skip
    policy = " ".join(
        f"Rule {i}: items returned within {14 + i} days are refunded in full if the seal"
        f" is intact; opened items lose {5 * i}% of their value."
        for i in range(1, 30)
    )
    turns: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": "You are Nordlys Freight's support agent. Be brief;"
          " use the tools to look parcels up."}],
        [{"role": "user", "content": "Hi! The door code for our Bergen warehouse is 7730,"
          " in case the driver needs it."},
         {"role": "assistant", "content": "Thanks, I noted the door code for Bergen."}],
        [{"role": "user", "content": "Where is order NF-2291?"},
         {"role": "assistant", "content": None,
          "tool_calls": [call("track_parcel", {"order": "NF-2291"}, 1)]},
         {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(tracking)},
         {"role": "assistant", "content": "NF-2291 reached our Oslo depot this morning."}],
        [{"role": "user", "content": f"Here is your returns policy, for reference: {policy}"},
         {"role": "assistant", "content": "Understood; I will apply these rules."}],
        [{"role": "user", "content": "我的订单 NF-3310 什么时候到？地址是上海市浦东新区。"},
         {"role": "assistant", "content": None,
          "tool_calls": [call("track_parcel", {"order": "NF-3310"}, 2)]},
         {"role": "tool", "tool_call_id": "call_2",
          "content": json.dumps({"order": "NF-3310", "status": "清关中", "eta": "2024-05-09"},
                                ensure_ascii=False)},
         {"role": "assistant", "content": "您的订单 NF-3310 正在清关，预计 5 月 9 日送达 📦"}],
        [{"role": "user", "content": "荷物が届いていません。追跡番号は NF-4102 です 🙏"},
         {"role": "assistant", "content": "ご不便をおかけしてすみません。配達状況を確認します。"}],
    ]  # fmt: skip
    for i in range(8):
        turns.append(
            [{"role": "user", "content": f"Please book a pickup for pallet {i + 1} of order"
              f" NF-{5000 + i} from the Stavanger depot."},
             {"role": "assistant", "content": f"Pickup {i + 1} booked for NF-{5000 + i}"
              f" on dock {i % 4 + 1} 🚚."}]
        )  # fmt: skip
    scans = {"order": "NF-5007", "scans": [
        {"at": f"2024-05-06T{h:02d}:{m:02d}Z", "where": f"Stavanger dock {m % 4 + 1}",
         "temperature_c": 4 + m % 3, "handler": f"scanner-{h}{m}"}
        for h in range(6, 12) for m in range(0, 60, 10)]}  # fmt: skip
    turns.append(
        [{"role": "user", "content": "Can you show every scan of NF-5007 today?"},
         {"role": "assistant", "content": None,
          "tool_calls": [call("parcel_scans", {"order": "NF-5007"}, 3)]},
         {"role": "tool", "tool_call_id": "call_3", "content": json.dumps(scans)},
         {"role": "assistant", "content": "NF-5007 was scanned 36 times, kept at 4–6 °C."}]
    )  # fmt: skip
    return turns


def fill(base_url: str) -> None:
    """The demo session, a context built at each turn (as chats do), and a few other tickets
    for the list; then wait until the archive can recall the door code."""
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
        for messages in conversation():
            http.post(f"/v1/sessions/{SESSION}/messages", json={"messages": messages})
            http.get(f"/v1/sessions/{SESSION}/context").raise_for_status()
        for other in ("ticket-8790", "ticket-8802", "ticket-8839", "ticket-8850"):
            hello = [{"role": "user", "content": f"Question about {other} 🙂"}]
            http.post(f"/v1/sessions/{other}/messages", json={"messages": hello})
        deadline = time.monotonic() + 20
        while True:
            report = http.get(f"/v1/sessions/{SESSION}/context", params={"query": QUERY}).json()
            if report["report"]["recalled_entries"] or time.monotonic() > deadline:
                return
            time.sleep(0.2)


def inspector(out: Path) -> None:
    """The inspector on the demo session, its context rebuilt for a question about an
    old turn (so that turns are recalled)."""
    settings = Settings(
        store="memory://", upstream="http://upstream.invalid/v1", api_keys={KEY: "demo"},
        budget_ratio=0.004,  # gpt-4o: a window of 512 tokens
    )  # fmt: skip
    with serving(create_app(settings)) as base_url:
        fill(base_url)
        with browser_page(height=1800) as page:
            # The key as a user would have entered it, before the page first asks.
            page.add_init_script(f"sessionStorage.setItem('ctxwindow.api-key', {json.dumps(KEY)})")
            page.goto(f"{base_url}/ui/#s={SESSION}")
            page.wait_for_selector("#sessions li")
            page.wait_for_selector("#timeline tbody tr")
            page.fill("#query", QUERY)
            page.press("#query", "Enter")
            page.wait_for_selector("#timeline tbody tr >> text=recalled")
            page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
            page.screenshot(path=str(out))


def report(out: Path) -> None:
    """The eval report of ``make demo`` (the same command), its first screen and a half."""
    strategies = "message_window,token_window,hybrid,hybrid_norecall,full"
    ctxwindow = Path(sys.executable).parent / "ctxwindow"  # the venv's command
    with tempfile.TemporaryDirectory() as folder:
        command = [str(ctxwindow), "eval", "--out", folder, "--strategies", strategies]
        subprocess.run(command, check=True)
        with browser_page(height=1700) as page:
            page.goto((Path(folder) / "report.html").as_uri())
            page.screenshot(path=str(out))


@contextmanager
def browser_page(height: int = 900) -> Iterator[Any]:
    """A page of headless chromium, as the tests open it (tests/support/browser.py)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": height})
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("which", nargs="*", default=["inspector", "report"])
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.which:
        {"inspector": inspector, "report": report}[name](args.out / f"{name}.png")
        print(args.out / f"{name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
