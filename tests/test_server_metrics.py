"""The metrics of a model: labelled by the registry entry's name and by the model sent, with
a bounded number of series (issue 26, item 10). Read as Prometheus reads them: the text of
``GET /metrics``, parsed by prometheus-client's own parser."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from ctxwindow.server import Settings, create_app
from ctxwindow.server.metrics import NAMES_PER_ENTRY, ModelLabels
from ctxwindow.tokens.registry import ModelRegistry
from tests.support.chat_upstream import FakeUpstream

USAGE = "ctxwindow_upstream_prompt_tokens_total"
CACHED = "ctxwindow_cached_tokens_total"
RATIO = "ctxwindow_count_ratio"


@pytest.fixture
def http() -> Iterator[TestClient]:
    settings = Settings(
        store="memory://", upstream="http://upstream.test/v1", archive="off",
        unknown_models="estimate",
    )  # fmt: skip
    with TestClient(create_app(settings, upstream_transport=FakeUpstream().transport())) as http:
        yield http


def _series(http: TestClient, name: str) -> dict[tuple[str, str], float]:
    """The samples of ``name`` in a scrape, by (model, model_sent)."""
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                found[(sample.labels["model"], sample.labels.get("model_sent", "-"))] = sample.value
    return found


def _ask(http: TestClient, model: str, content: str = "Where is parcel D-4? 包裹在哪里 📦") -> None:
    answer = http.post(
        "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": content}]},
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("sent", "entry"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.x"),  # the glob *llama-3.[123]*
        ("gpt-4o-2024-08-06", "gpt-4o"),  # a dated snapshot of a family
        ("claude-sonnet-4-5", "claude-sonnet-4"),  # the glob *claude-sonnet-4*
        ("acme-7b-中文", "unknown"),  # no entry: the estimator
    ],
)
def test_a_request_is_counted_under_its_entry_and_the_model_it_sent(
    http: TestClient, sent: str, entry: str
) -> None:
    client = openai.OpenAI(
        base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0
    )
    for _ in range(2):
        client.chat.completions.create(
            model=sent, messages=[{"role": "user", "content": "配達状況を教えて 🚚"}],
            extra_headers={"X-Session-Id": "s"},
        )  # fmt: skip
    assert _series(http, USAGE) == {(entry, sent): 2.0}  # the fake upstream bills 1 each
    assert _series(http, CACHED) == {(entry, sent): 0.0}
    ratios = _series(http, RATIO)
    # a ratio is kept per entry (every name it matches), a name no entry matches by name
    assert list(ratios) == [(entry, sent if entry == "unknown" else "")]


def test_a_thousand_unknown_names_make_a_bounded_number_of_series(http: TestClient) -> None:
    for i in range(1000):
        _ask(http, f"made-up-model-{i}")
    usage = _series(http, USAGE)
    assert len(usage) == NAMES_PER_ENTRY + 1
    assert {model for model, _ in usage} == {"unknown"}
    kept = {f"made-up-model-{i}" for i in range(NAMES_PER_ENTRY)}
    assert {sent for _, sent in usage} == kept | {"other"}  # the first names keep theirs
    assert usage[("unknown", "other")] == 1000 - NAMES_PER_ENTRY
    assert len(_series(http, RATIO)) <= NAMES_PER_ENTRY + 1
    _ask(http, "gpt-4o")  # an entry's names are counted apart: unknown names took none
    assert _series(http, USAGE)[("gpt-4o", "gpt-4o")] == 1.0


def test_names_one_glob_matches_are_bounded_per_entry(http: TestClient) -> None:
    for i in range(3 * NAMES_PER_ENTRY):
        _ask(http, f"anthropic/claude-3-haiku-{i}")
    usage = _series(http, USAGE)
    assert len(usage) == NAMES_PER_ENTRY + 1
    assert usage[("claude-3-haiku", "other")] == 2 * NAMES_PER_ENTRY


def test_entry_labels_are_readable_and_never_shared() -> None:
    """Globs lose their wildcards (a class is ``x``); two entries that would read alike keep
    their names (a glob that reads as a model name, too)."""
    registry = ModelRegistry(unknown="estimate").with_entries(
        {"acme-*": {"context_window": 8192, "estimate": True},
         "*acme-": {"context_window": 8192, "estimate": True},
         "gpt-4o*": {"context_window": 8192, "estimate": True},
         "qwen3:[0-9]*b": {"context_window": 8192, "estimate": True}}
    )  # fmt: skip
    labels = ModelLabels(registry)
    assert labels.entry("*llama-3.[123]*") == "llama-3.x"
    assert labels.entry("*qwen3*2507*") == "qwen3…2507"
    assert labels.entry("qwen3:[0-9]*b") == "qwen3:x…b"
    assert labels.entry("acme-*") == "acme-*" and labels.entry("*acme-") == "*acme-"
    assert labels.entry("gpt-4o*") == "gpt-4o*"  # else it would read as the built-in gpt-4o
    assert labels.entry("gpt-4o") == "gpt-4o"
    every = [labels.entry(name) for name in [*registry.configured, *registry.known()]]
    assert all("*" not in label or label in registry.configured for label in every)
