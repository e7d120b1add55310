"""What users paste is redacted before it is stored, and ids stay out of listings (issue:
the kinds the docs listed as not covered were exactly those).

Through the service with ``redact="storage"``: each finding of the outside
attack is appended as a user would (Chinese, Japanese, Korean and English),
and neither the stored history nor the context holds the secret; with
``listed_ids="redacted"`` an e-mail used as a session id is not listed.
The detectors' own cases are in tests/test_redact.py.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app

FINDINGS = [  # (what a user pasted, the secret in it, the placeholder it becomes)
    ("SECRET=9f8e7d6c5b4a3f2e1d0c in my .env", "9f8e7d6c5b4a3f2e1d0c", "[SECRET]"),
    ("my SSN is 536-22-8145, is that safe?", "536-22-8145", "[SSN]"),
    (
        "SendGrid: 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",
        "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",
        "[API_KEY]",
    ),
    (
        "publish with npm_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ in CI",
        "npm_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ",
        "[API_KEY]",
    ),
    ("비밀번호는 qwer1234! 입니다", "qwer1234!", "[PASSWORD]"),
    ("密码：Zx9!kLm2，别外传", "Zx9!kLm2", "[PASSWORD]"),
    ('{"contact": "li.lei\\u0040example.com"}', "li.lei\\u0040example.com", "[EMAIL]"),
    (
        "AWS secret key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY for the deploy",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "[CLOUD_KEY]",
    ),
    ("パスワードを変更しました: newPass123", "newPass123", "[PASSWORD]"),
    ("iban: it60 x054 2811 1010 0000 0123 456", "it60 x054 2811 1010 0000 0123 456", "[IBAN]"),
]


def refuse(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"appending never calls the upstream ({request.url})")


@pytest.fixture
def service() -> Iterator[TestClient]:
    settings = Settings(
        store="memory://", upstream="http://upstream.test/v1", archive="off", redact="storage",
        listed_ids="redacted", listed_ids_key="a listing key of the deployment",
    )  # fmt: skip
    app = create_app(settings, upstream_transport=httpx.MockTransport(refuse))
    with TestClient(app) as http:
        yield http


@pytest.mark.parametrize(("pasted", "secret", "placeholder"), FINDINGS)
def test_what_users_paste_is_redacted_before_it_is_stored(
    service: TestClient, pasted: str, secret: str, placeholder: str
) -> None:
    body = {"messages": [{"role": "user", "content": pasted}]}
    assert service.post("/v1/sessions/s/messages", json=body).status_code == 200
    stored = service.get("/v1/sessions/s/messages").text
    context = service.get("/v1/sessions/s/context").text
    for shown in (stored, context):
        assert secret not in shown and json.dumps(secret)[1:-1] not in shown
    assert (
        placeholder
        in service.get("/v1/sessions/s/messages").json()["data"][-1]["message"]["content"]
    )


def test_an_email_as_a_session_id_is_not_listed(service: TestClient) -> None:
    path = urllib.parse.quote("ola.nordmann@example.no", safe="")
    body = {"messages": [{"role": "user", "content": "hei"}]}
    assert service.post(f"/v1/sessions/{path}/messages", json=body).status_code == 200
    listing = service.get("/v1/sessions")
    assert "ola.nordmann" not in listing.text
    (session,) = listing.json()["data"]
    assert session["id"] == "[EMAIL]"
    assert service.get(f"/v1/sessions/{session['ref']}/messages").json()["data"]
