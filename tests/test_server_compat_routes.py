"""The routes an SDK user calls beside the three protocols, with the real ``openai`` and
``anthropic`` SDKs against the app in-process: ``models.list`` and ``models.retrieve``
(both SDKs), ``responses.retrieve``, Anthropic's ``messages.count_tokens``, and the error
shape of routes the service does not have.

The upstream is one fake that speaks Responses, Messages and ``GET /v1/models`` (in
OpenAI's shape, or Anthropic's when asked with ``anthropic-version``), and fails that list
on demand.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from ctxwindow.tokens.defaults import default_models
from ctxwindow.tokens.registry import is_glob
from tests.support.docs_examples import examples
from tests.support.protocol_upstreams import FakeMessages, FakeResponses
from tests.support.sdk_clients import anthropic_client as claude
from tests.support.sdk_clients import openai_client as oai
from tests.support.sdk_clients import stored

CLAUDE = "claude-sonnet-4-5"
TOOLS: Any = [
    {"name": "where_is", "description": "包裹在哪里 · where a parcel is 📦",
     "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}}}
]  # fmt: skip
OPENAI_LIST = {
    "object": "list",
    "data": [
        {"id": "gpt-4o-2024-08-06", "object": "model", "created": 1722814719,
         "owned_by": "system"},
        {"id": "meta-llama/Llama-3.1-8B-Instruct", "object": "model", "created": 1721692800,
         "owned_by": "meta-llama"},
        {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"},
    ],
}  # fmt: skip
ANTHROPIC_LIST = {
    "data": [
        {"type": "model", "id": "claude-sonnet-4-5-20250929", "display_name": "Claude Sonnet 4.5",
         "created_at": "2025-09-29T00:00:00Z"},
        {"type": "model", "id": "claude-haiku-4-5", "display_name": "Claude Haiku 4.5 🚀",
         "created_at": "2025-10-15T00:00:00Z"},
    ],
    "has_more": False, "first_id": "claude-sonnet-4-5-20250929", "last_id": "claude-haiku-4-5",
}  # fmt: skip
REGISTRY = [n for n in dict.fromkeys(default_models().known()) if not is_glob(n)]


class Upstream:
    """Responses and Messages as ``tests/protocol_upstreams.py`` fakes them, and the model
    list: ``listing`` "ok", an HTTP status ("404", "500"), "garbage" or "down"."""

    def __init__(self) -> None:
        self.responses = FakeResponses()
        self.messages = FakeMessages()
        self.listing = "ok"
        self.asked: list[httpx.Request] = []  # the requests for the model list

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return self.models(request)
        fake = self.messages if request.url.path.endswith("/messages") else self.responses
        return fake.handle(request)

    def models(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(request)
        if self.listing == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if self.listing == "garbage":
            return httpx.Response(200, content=b"<html>not a list</html>")
        if self.listing != "ok":
            return httpx.Response(int(self.listing), json={"error": {"message": "no"}})
        listed = ANTHROPIC_LIST if "anthropic-version" in request.headers else OPENAI_LIST
        return httpx.Response(200, json=listed)


def app_for(upstream: Upstream, **settings: Any) -> TestClient:
    settings = {"store": "memory://", "upstream": "http://upstream.test/v1", "archive": "off",
                "upstream_api_key": "sk-upstream", **settings}  # fmt: skip
    transport = httpx.MockTransport(upstream.handle)
    return TestClient(create_app(Settings(**settings), upstream_transport=transport))


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def http(upstream: Upstream) -> Iterator[TestClient]:
    with app_for(upstream) as client:
        yield client


# -- GET /v1/models ------------------------------------------------------------------------


def test_openai_models_list_is_the_upstreams_then_the_registrys_names(
    http: TestClient, upstream: Upstream
) -> None:
    listed = oai(http).models.with_raw_response.list()
    models = list(listed.parse())
    assert listed.headers["x-context-upstream-listed"] == "true"
    ids = [m.id for m in models]
    assert ids[:3] == [m["id"] for m in OPENAI_LIST["data"]]  # type: ignore[index]
    assert ids[3:] == [n for n in REGISTRY if n != "gpt-4o"]  # once, as the upstream lists it
    assert models[0].created == 1722814719 and models[0].owned_by == "system"
    assert {(m.object, m.created, m.owned_by) for m in models[3:]} == {("model", 0, "ctxwindow")}
    assert not any(is_glob(i) for i in ids)
    asked = upstream.asked[-1]
    assert asked.url.path == "/v1/models"
    assert asked.headers["authorization"] == "Bearer sk-upstream"
    assert "anthropic-version" not in asked.headers


@pytest.mark.parametrize("listing", ["404", "500", "garbage", "down"])
def test_an_upstream_without_a_list_leaves_the_registrys_names(
    http: TestClient, upstream: Upstream, listing: str
) -> None:
    upstream.listing = listing
    listed = oai(http).models.with_raw_response.list()
    assert [m.id for m in listed.parse()] == REGISTRY
    assert listed.headers["x-context-upstream-listed"] == "false"
    with pytest.raises(anthropic.NotFoundError):
        claude(http).models.retrieve("claude-haiku-4-5")  # only the upstream listed it
    assert claude(http).models.retrieve("gpt-4o").id == "gpt-4o"


def test_openai_models_retrieve(http: TestClient) -> None:
    client = oai(http)
    assert client.models.retrieve("gpt-4o").created == 1715367049  # the upstream's
    llama = client.models.retrieve("meta-llama/Llama-3.1-8B-Instruct")  # a slash, encoded
    assert llama.owned_by == "meta-llama"
    assert client.models.retrieve("o3-mini").owned_by == "ctxwindow"
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("模型-🙂")
    assert raised.value.code == "model_not_found" and "模型-🙂" in raised.value.message


def test_anthropic_models_list_pages_in_anthropics_shape(
    http: TestClient, upstream: Upstream
) -> None:
    client = claude(http)
    first = client.models.list(limit=2)
    assert [m.id for m in first.data] == ["claude-sonnet-4-5-20250929", "claude-haiku-4-5"]
    assert first.has_more and first.last_id == "claude-haiku-4-5"
    every = [m.id for m in client.models.list(limit=7)]  # the SDK follows has_more
    assert every == ["claude-sonnet-4-5-20250929", "claude-haiku-4-5", *REGISTRY]
    haiku = client.models.retrieve("claude-haiku-4-5")
    assert haiku.display_name == "Claude Haiku 4.5 🚀" and haiku.created_at.year == 2025
    gpt = client.models.retrieve("gpt-4o")  # the registry's: its window and output limit
    info = default_models().resolve("gpt-4o")
    assert (gpt.max_input_tokens, gpt.max_tokens) == (info.context_window, info.max_output)
    assert gpt.created_at.timestamp() == 0 and gpt.type == "model"
    asked = upstream.asked[-1]
    assert asked.headers["x-api-key"] == "sk-upstream" and "authorization" not in asked.headers
    assert asked.headers["anthropic-version"] and asked.url.params["limit"] == "1000"
    before = http.get("/v1/models", params={"before_id": "gpt-4o", "limit": 1},
                      headers={"anthropic-version": "2023-06-01"}).json()  # fmt: skip
    assert [m["id"] for m in before["data"]] == [REGISTRY[REGISTRY.index("gpt-4o") - 1]]
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.models.list(after_id="no-such-model")
    assert raised.value.body["error"]["param"] == "after_id"  # type: ignore[index]


def test_models_need_a_key_given_either_way(upstream: Upstream) -> None:
    with app_for(upstream, api_keys={"key-a": "acme"}) as http:
        assert oai(http, "key-a").models.list().data
        assert claude(http, "key-a").models.list().data
        with pytest.raises(openai.AuthenticationError):
            oai(http, "key-b").models.list()
        with pytest.raises(anthropic.AuthenticationError) as raised:
            claude(http, "key-b").models.list()
        assert raised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


# -- GET /v1/responses/{id} ----------------------------------------------------------------


def test_responses_retrieve_answers_the_response_as_it_was_created(
    http: TestClient, upstream: Upstream
) -> None:
    client = oai(http)
    upstream.responses.reply = "包裹在京都 🚚、もうすぐ着きます"
    created = client.responses.create(model="gpt-4o", input="D-4 在哪里？")
    got = client.responses.retrieve(created.id)
    assert got.model_dump() == created.model_dump()
    assert got.output_text == "包裹在京都 🚚、もうすぐ着きます" and got.status == "completed"
    assert got.usage is not None and got.usage.total_tokens == 17
    later = client.responses.create(model="gpt-4o", input="And?", previous_response_id=got.id)
    assert client.responses.retrieve(created.id).id == created.id  # an older one of the session
    assert client.responses.retrieve(later.id).previous_response_id == created.id
    assert len(upstream.responses.requests) == 2  # retrieving asks nobody


def test_a_streamed_response_is_retrieved_as_its_last_event_said(
    http: TestClient, upstream: Upstream
) -> None:
    client = oai(http)
    with client.responses.stream(model="gpt-4o", input="Stream me 🙂") as stream:
        final = stream.get_final_response()
    got = client.responses.retrieve(final.id)
    assert got.id == final.id and got.output_text == final.output_text == upstream.responses.reply


def test_a_retry_answers_the_same_response_id(http: TestClient) -> None:
    client = oai(http, **{"Idempotency-Key": "k-1"})
    first = client.responses.create(model="gpt-4o", input="Once", conversation="idem")
    again = client.responses.create(model="gpt-4o", input="Once", conversation="idem")
    assert again.id == first.id
    assert client.responses.retrieve(first.id).output_text == first.output_text


def test_a_response_is_the_tenants_own(upstream: Upstream) -> None:
    keys = {"key-a": "acme", "key-b": "globex"}
    with app_for(upstream, api_keys=keys) as http:
        mine = oai(http, "key-a").responses.create(model="gpt-4o", input="secret plans")
        assert oai(http, "key-a").responses.retrieve(mine.id).id == mine.id
        with pytest.raises(openai.NotFoundError) as raised:
            oai(http, "key-b").responses.retrieve(mine.id)
    assert raised.value.code == "response_not_found"
    assert "secret" not in str(raised.value.body)


@pytest.mark.parametrize(
    "made",
    ["stateless", "deleted", "unknown", "foreign"],
)
def test_a_response_the_service_does_not_keep_is_a_404(http: TestClient, made: str) -> None:
    client = oai(http)
    if made == "stateless":
        rid = client.responses.create(model="gpt-4o", input="x", store=False).id
    elif made == "deleted":
        rid = client.responses.create(model="gpt-4o", input="x", conversation="gone").id
        assert http.delete("/v1/sessions/gone").status_code == 200
    elif made == "unknown":  # a session that exists, a response it never had
        real = client.responses.create(model="gpt-4o", input="x", conversation="c-9").id
        rid = "resp_" + "0" * 24 + real[len("resp_") + 24 :]
    else:
        rid = "resp_not-one-of-ours-会话"
    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.retrieve(rid)
    assert raised.value.code == "response_not_found" and raised.value.param == "response_id"


def test_a_response_is_read_back_whole_not_streamed(http: TestClient) -> None:
    client = oai(http)
    created = client.responses.create(model="gpt-4o", input="x")
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.retrieve(created.id, stream=True)
    assert raised.value.param == "stream"


def test_a_retrieved_response_is_masked_as_the_store_keeps_it(upstream: Upstream) -> None:
    upstream.responses.reply = "请写信到 li@example.com 📮"
    with app_for(upstream, redact="storage") as http:
        client = oai(http)
        created = client.responses.create(model="gpt-4o", input="联系方式？")
        got = client.responses.retrieve(created.id)
    assert created.output_text == "请写信到 li@example.com 📮"  # answered as the upstream said
    assert got.output_text == "请写信到 [EMAIL] 📮" and got.id == created.id


# -- POST /v1/messages/count_tokens --------------------------------------------------------


def test_count_tokens_of_a_stateless_request_is_what_the_request_is_charged(
    http: TestClient, upstream: Upstream
) -> None:
    client = claude(http)
    question = {"role": "user", "content": "包裹 D-4 在哪里？🚚 東京駅から"}
    ask: Any = {"model": CLAUDE, "system": "用中文简短回答 🙂", "tools": TOOLS,
                "messages": [question]}  # fmt: skip
    counted = client.messages.with_raw_response.count_tokens(**ask)
    tokens = counted.parse().input_tokens
    assert counted.headers["x-context-estimated"] == "true"  # Claude's counts are estimates
    assert upstream.messages.requests == []  # counting asks nobody
    created = client.messages.with_raw_response.create(max_tokens=64, **ask)
    assert tokens == int(created.headers["x-context-tokens"]) > 0


def test_count_tokens_of_a_session_is_of_the_context_it_would_be_sent(
    http: TestClient, upstream: Upstream
) -> None:
    client = claude(http, **{"X-Session-Id": "s-7"})
    client.messages.create(model=CLAUDE, max_tokens=64, tools=TOOLS,
                           messages=[{"role": "user", "content": "Where is D-4? 🚚"}])  # fmt: skip
    call_id = stored(http, "s-7")[-1]["tool_calls"][0]["id"]  # answered with a tool_use
    result: Any = [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call_id, "content": "京都 · Kyoto"},
        {"type": "text", "text": "それで？"}]}]  # fmt: skip
    question: Any = [{"role": "user", "content": "いつ着きますか？📦"}]
    for turns in (result, question):  # several new turns, then one
        before = stored(http, "s-7")
        sent = len(upstream.messages.requests)
        counted = client.messages.with_raw_response.count_tokens(
            model=CLAUDE, tools=TOOLS, messages=turns
        )
        assert stored(http, "s-7") == before and len(upstream.messages.requests) == sent
        created = client.messages.with_raw_response.create(
            model=CLAUDE, max_tokens=64, tools=TOOLS, messages=turns
        )
        assert counted.parse().input_tokens == int(created.headers["x-context-tokens"])


def test_count_tokens_of_a_session_over_its_budget_counts_the_window(http: TestClient) -> None:
    turns = [{"role": r, "content": f"第{i}回 · turn {i}: " + "话 word " * 40}
             for i in range(12) for r in ("user", "assistant")]  # fmt: skip
    assert http.post("/v1/sessions/long/messages",
                     json={"model": CLAUDE, "messages": turns}).status_code == 200  # fmt: skip
    client = claude(http, **{"X-Session-Id": "long", "X-Context-Max-Tokens": "400"})
    counted = client.messages.with_raw_response.count_tokens(
        model=CLAUDE, messages=[{"role": "user", "content": "最初に何と言いましたか？"}]
    )
    assert counted.parse().input_tokens <= 400
    assert int(counted.headers["x-context-evicted"]) > 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": CLAUDE}, "messages"),
        ({"model": "no-such-model-🙂", "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": CLAUDE, "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]},
         "max_tokens"),
    ],
)  # fmt: skip
def test_count_tokens_refuses_bad_input_in_anthropics_shape(
    http: TestClient, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude(http).post("/v1/messages/count_tokens", body=body, cast_to=object)
    error = raised.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["param"] == param


# -- routes the service does not have ------------------------------------------------------


def test_an_unknown_openai_route_is_openais_404(http: TestClient) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        oai(http).files.list()
    assert raised.value.code == "not_found" and raised.value.type == "not_found_error"
    assert "GET /v1/files" in raised.value.message
    answer = http.get("/v1/会话/🙂")
    assert answer.status_code == 404 and set(answer.json()) == {"error"}
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("call", ["batches", "files", "count_405", "messages_405"])
def test_an_anthropic_client_gets_anthropics_shape(http: TestClient, call: str) -> None:
    client = claude(http)
    with pytest.raises(anthropic.APIStatusError) as raised:
        if call == "batches":  # under /v1/messages
            client.messages.batches.list()
        elif call == "files":  # elsewhere, known by its anthropic-version
            client.beta.files.list()
        elif call == "count_405":
            client.get("/v1/messages/count_tokens", cast_to=object)
        else:
            client.get("/v1/messages", cast_to=object)
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    if call in ("batches", "files"):
        assert raised.value.status_code == 404
        assert body["error"]["type"] == "not_found_error" and body["error"]["code"] == "not_found"
    else:
        assert raised.value.status_code == 405
        assert raised.value.response.headers["allow"] == "POST"
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["code"] == "method_not_allowed"


def test_the_messages_route_refuses_in_anthropics_shape(http: TestClient) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude(http).messages.create(model=CLAUDE, max_tokens=0,
                                     messages=[{"role": "user", "content": "x"}])  # fmt: skip
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["param"] == "max_tokens"


def test_deleting_a_response_is_a_405_naming_what_the_path_takes(http: TestClient) -> None:
    client = oai(http)
    created = client.responses.create(model="gpt-4o", input="x")
    with pytest.raises(openai.APIStatusError) as raised:
        client.responses.delete(created.id)
    assert raised.value.status_code == 405 and raised.value.code == "method_not_allowed"
    assert raised.value.response.headers["allow"] == "GET"


def test_the_openapi_document_has_the_routes_and_their_error_shapes(http: TestClient) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    ref = "#/components/schemas/"
    for path, method, schema in [
        ("/v1/models", "get", "AnyError"),
        ("/v1/models/{model_id}", "get", "AnyError"),
        ("/v1/responses/{response_id}", "get", "Error"),
        ("/v1/messages/count_tokens", "post", "AnthropicError"),
        ("/v1/messages", "post", "AnthropicError"),
    ]:
        responses = paths[path][method]["responses"]
        errors = {s: r for s, r in responses.items() if s.startswith(("4", "5"))}
        assert errors, path
        for answer in errors.values():
            assert answer["content"]["application/json"]["schema"]["$ref"] == ref + schema


def test_the_documented_examples_print_what_the_docs_say() -> None:
    """docs/server.md's Compatibility routes examples, each self-contained (in-process)."""
    printed = []
    for code in examples("Compatibility routes", doc="server.md"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/server.md", "exec"), {"__name__": "doc"})
        printed.append(out.getvalue())
    assert printed == [
        "gpt-4o-2024-08-06 True ctxwindow\n",
        "True 京都に着きました 🚚\n",
        "True true\n",
    ]
