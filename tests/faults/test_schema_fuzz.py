"""Schema fuzzing: schemathesis drives the app's own OpenAPI document, in-process (ASGI).

Every operation gets generated requests, valid and invalid by the schema
(headers, query, path and bodies), against a fresh app on a SQLite store with
an upstream that answers. Hypothesis is derandomized, so CI runs the same
cases every time, and ``max_examples`` bounds each operation.

(The cases are drawn with ``APIOperation.as_strategy`` under ``@given`` rather
than schemathesis's pytest plugin, whose fixture-based loader needs a pytest
attribute that pytest 9 removed.)

Budget: ~45 s for both tests on 2 cores (8 operations, two generation modes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ctxwindow.server import Settings, create_app
from tests.support.faults.upstream import FaultyUpstream

pytestmark = pytest.mark.slow

FUZZ = settings(
    max_examples=40, derandomize=True, database=None, deadline=10_000,  # a hang, not a speed
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large],
)  # fmt: skip
OPERATIONS = [
    (path, method.upper())
    for path, item in create_app(Settings(store="memory://")).openapi()["paths"].items()
    for method in item
]
DOCUMENTED = [
    not_a_server_error, status_code_conformance, content_type_conformance,
    response_headers_conformance, response_schema_conformance,
]  # fmt: skip


@pytest.fixture
def api_schema(tmp_path: Path, upstream: FaultyUpstream) -> Iterator[Any]:
    """The OpenAPI document of a fresh app (SQLite store, answering upstream)."""
    settings = Settings(
        store=f"sqlite:///{tmp_path / 'sessions.db'}", upstream=upstream.base_url,
        data_dir=tmp_path, upstream_timeout=5,
    )  # fmt: skip
    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(settings))


def cases(api_schema: Any, path: str, method: str) -> st.SearchStrategy[Any]:
    operation = api_schema[path][method]
    return st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_no_request_gets_a_server_error(api_schema: Any, path: str, method: str) -> None:
    """Whatever the request, valid or not by the schema, the answer is never a 5xx."""

    @FUZZ
    @given(case=cases(api_schema, path, method))
    def fuzz(case: Any) -> None:
        case.call_and_validate(checks=[not_a_server_error])

    fuzz()


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_every_answer_is_documented(api_schema: Any, path: str, method: str) -> None:
    """Every status, header and body the service answers is one its OpenAPI declares."""

    @settings(FUZZ, max_examples=20)
    @given(case=cases(api_schema, path, method))
    def fuzz(case: Any) -> None:
        case.call_and_validate(checks=DOCUMENTED)

    fuzz()
