"""What a client was told, to check against what the store kept.

``Ledger.turn`` sends one question of a session with an ``Idempotency-Key``
and records it when the service acknowledged it (200). ``assert_kept`` then
checks the store: every acknowledged question once, in order, followed by its
own answer (questions that were not acknowledged may be there or not).
"""

from __future__ import annotations

import hashlib
import threading
import time
import urllib.parse
from collections import defaultdict
from typing import Any

import httpx

from tests.support.faults.upstream import echo

HANG = 20.0  # seconds: twice the stores' 5 s timeout, and a margin; longer is a hang
RECOVERY = 5.0  # seconds after a store returns within which every session is usable again


class Hung(AssertionError):
    pass


class Ledger:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.acknowledged: defaultdict[str, list[str]] = defaultdict(list)
        self._guard = threading.Lock()

    def client(self, timeout: float = HANG) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    def turn(self, sid: str, text: str, key: str | None = None) -> httpx.Response:
        """POST one question; a 200 is recorded as acknowledged. ``Hung`` past ``HANG``."""
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
        headers = {
            "X-Session-Id": sid,
            "Idempotency-Key": key or hashlib.sha1(text.encode()).hexdigest(),
        }
        with self.client() as client:
            try:
                response = client.post("/v1/chat/completions", json=body, headers=headers)
            except httpx.TimeoutException as exc:
                raise Hung(f"POST for session {sid!r} hung for over {HANG} s") from exc
        if response.status_code == 200:
            assert response.json()["choices"][0]["message"]["content"] == echo(body)
            with self._guard:
                if text not in self.acknowledged[sid]:  # a replayed retry is one turn
                    self.acknowledged[sid].append(text)
        return response

    def get(self, path: str) -> httpx.Response:
        with self.client() as client:
            try:
                return client.get(path)
            except httpx.TimeoutException as exc:
                raise Hung(f"GET {path} hung for over {HANG} s") from exc

    def history(self, sid: str) -> list[dict[str, Any]]:
        response = self.get(f"/v1/sessions/{urllib.parse.quote(sid, safe='')}/messages")
        assert response.status_code == 200, response.text[:400]
        return [entry["message"] for entry in response.json()["data"]]

    def assert_kept(self) -> None:
        """Every acknowledged question once, in order, each followed by its answer."""
        for sid, asked in self.acknowledged.items():
            history = self.history(sid)
            contents = [m["content"] for m in history]
            questions = [m["content"] for m in history if m["role"] == "user"]
            assert len(set(questions)) == len(questions), f"{sid}: a question stored twice"
            assert [q for q in questions if q in asked] == asked, (
                f"{sid}: acknowledged {asked}, stored {questions}"
            )
            for question in asked:
                at = contents.index(question)
                assert contents[at + 1 : at + 2] == [f"answer to: {question}"], (
                    f"{sid}: {question!r} is not followed by its answer: {contents}"
                )

    def usable_within(self, sids: list[str], since: float, label: str) -> dict[str, float]:
        """A new turn of each session succeeds within ``RECOVERY`` s of ``since`` (a 409 or
        503 meanwhile is retried with the same key); the seconds each took."""
        took: dict[str, float] = {}
        for sid in sids:
            text = f"{sid}: after {label} — 再来一次 ✅"
            while True:
                response = self.turn(sid, text)
                now = time.monotonic()
                if response.status_code == 200:
                    took[sid] = round(now - since, 2)
                    break
                assert response.status_code in (409, 503), response.text[:400]
                assert now - since < RECOVERY, (
                    f"session {sid!r} still answers {response.status_code} "
                    f"{now - since:.1f} s after the store returned: {response.text[:200]}"
                )
                time.sleep(0.1)
        assert max(took.values()) <= RECOVERY, f"usable only after {took} s"
        return took


def assert_unavailable(response: httpx.Response) -> None:
    """503 with ``Retry-After`` (a store that is down), in the OpenAI error shape."""
    assert response.status_code == 503, f"{response.status_code}: {response.text[:400]}"
    assert "retry-after" in response.headers, dict(response.headers)
    assert "error" in response.json()


def assert_ready(ledger: Ledger, ready: bool, within: float = 0.0) -> None:
    """``/readyz`` is 200 (or 503), at once or within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        response = ledger.get("/readyz")
        if (response.status_code == 200) == ready or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    assert response.status_code == (200 if ready else 503), response.text[:400]
