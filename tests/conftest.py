"""Shared fixtures (from tests/support), Hypothesis settings, the markers of `make test-fast`."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, settings

# Fixtures for every test module: ``browser`` (headless chromium), ``case`` (one store of each
# kind and flavour), ``make_archive`` and ``postgres_url`` (archives of each backend).
pytest_plugins = ["tests.support.browser", "tests.support.stores", "tests.support.archives"]

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# The eval keeps its vectors in ~/.cache by default (ctxwindow.eval.vector_cache): the tests
# keep none there, and measure what a first run computes; the cache's own tests name a file.
os.environ["CTXWINDOW_EMBEDDING_CACHE"] = "off"


# --- markers for `make test-fast` ---------------------------------------------------------------
#
# `servers`, `browser` and `slow` are registered in pyproject.toml. A module that needs them all
# through says so with ``pytestmark``; single tests are marked here, by a rule:
#   browser  a test that uses the ``browser`` fixture (tests/support/browser.py);
#   servers  a test that uses a server's fixture (``postgres_url``; the fault suite's private
#            ``private_redis``, ``private_postgres``), or whose name or parameters name Redis or
#            PostgreSQL (the store cases ``redis-sync``, ``postgresql-async``, ``pgbouncer-sync``,
#            ``test_redis_...``).
SERVER_FIXTURES = {"postgres_url", "private_redis", "private_postgres", "postgres_template"}
NAMES_A_SERVER = re.compile(r"redis|postgres|pgbouncer", re.IGNORECASE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the rules above."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)
        if fixtures & SERVER_FIXTURES or NAMES_A_SERVER.search(item.name):
            item.add_marker(pytest.mark.servers)
