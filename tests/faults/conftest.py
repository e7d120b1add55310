"""Fixtures of the fault suite: the failing upstream and private Redis/PostgreSQL servers."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults.servers import (
    PrivatePostgres,
    PrivateRedis,
    make_postgres_template,
    no_server,
    private_directory,
)
from tests.support.faults.upstream import FaultyUpstream, faulty_upstream

if sys.platform == "win32":  # pragma: no cover
    collect_ignore_glob = ["test_*.py"]  # signals, process groups and loopback servers


@pytest.fixture
def upstream() -> Iterator[FaultyUpstream]:
    with faulty_upstream() as fake:
        yield fake


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A Redis of this test only, started; stopped and removed afterwards."""
    if PrivateRedis.binary is None:
        no_server("redis-server is not installed (apt-get install redis-server)")
    directory = private_directory("ctxwindow-redis-")
    server = PrivateRedis(directory)
    try:
        server.start()
        yield server
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[Path]:
    template = make_postgres_template()
    yield template
    shutil.rmtree(template.parent, ignore_errors=True)


@pytest.fixture
def private_postgres(postgres_template: Path) -> Iterator[PrivatePostgres]:
    """A PostgreSQL of this test only, started; stopped and removed afterwards."""
    directory = private_directory("ctxwindow-pg-")
    server = PrivatePostgres(directory, postgres_template)
    try:
        server.start()
        yield server
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
