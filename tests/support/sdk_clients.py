"""The real openai and anthropic SDKs as clients of the app, in-process, and what it stored.

The openai SDK takes a Starlette ``TestClient`` as its http client (both are
httpx). The Anthropic SDK runs on ``httpx2``: ``Bridge`` hands its requests to
the ``TestClient``.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
from fastapi.testclient import TestClient


class Bridge(httpx2.BaseTransport):
    """An httpx2 transport that sends each request through a Starlette ``TestClient``."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        answer = self.client.request(
            request.method, str(request.url), headers=dict(request.headers),
            content=request.read(),
        )  # fmt: skip
        headers = [(k, v) for k, v in answer.headers.multi_items() if k != "content-encoding"]
        return httpx2.Response(answer.status_code, headers=headers, content=answer.content)


def openai_client(http: TestClient, key: str = "none", **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key=key, max_retries=0,
        http_client=http,  # type: ignore[arg-type]  # typed against httpx2; httpx works
        default_headers=headers,
    )  # fmt: skip


def anthropic_client(http: TestClient, key: str = "none", **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url="http://testserver", api_key=key, max_retries=0,
        http_client=httpx2.Client(transport=Bridge(http), base_url="http://testserver"),
        default_headers=headers,
    )  # fmt: skip


def stored(http: TestClient, session: str) -> list[dict[str, Any]]:
    """The messages the app stored for ``session``, in order."""
    answer = http.get(f"/v1/sessions/{session}/messages")
    assert answer.status_code == 200, answer.text
    return [entry["message"] for entry in answer.json()["data"]]
