"""Server settings: defaults, environment, config files, start-up validation, the bind rule."""

from __future__ import annotations

import gc
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ctxwindow.server import Settings, http, load_settings, main
from ctxwindow.server.main import serve_command


def test_defaults_are_loopback_and_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert (settings.host, settings.port) == ("127.0.0.1", 8000)
    assert settings.store_url() == f"sqlite:///{tmp_path.resolve()}/sessions.db"
    assert settings.budget_for("gpt-4o") == 96_000
    assert settings.budget_for("gpt-4o", max_tokens=16_000) == 80_000


def test_environment_variables_use_the_ctxwindow_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWINDOW_PORT", "9001")
    monkeypatch.setenv("CTXWINDOW_API_KEYS", '{"k1": "team-a"}')
    monkeypatch.setenv("CTXWINDOW_UPSTREAM_API_KEY", "sk-from-env")
    settings = Settings()
    assert settings.port == 9001
    assert settings.api_keys == {"k1": "team-a"}
    assert settings.upstream_api_key is not None
    assert settings.upstream_api_key.get_secret_value() == "sk-from-env"
    assert "sk-from-env" not in repr(settings)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("upstream", "ftp://x", "http(s) URL"),
        ("store", "mysql://x", "unknown store URL scheme"),
        ("budget_ratio", 1.5, "less than or equal to 1"),
        ("port", 70000, "less than or equal to 65535"),
        ("api_keys", {"k": "a:b"}, "tenant names without ':'"),
        ("max_request_bytes", 0, "greater than or equal to 1"),
        ("surprise", 1, "Extra inputs are not permitted"),
        ("redact", "sometimes", "'off', 'storage' or 'upstream'"),
        ("lock_timeout", -1, "greater than or equal to 0"),
        ("rate_limit_url", "http://:pw@x", "a redis:// URL or 'local'"),
        ("budgets", {"gpt-4o": 0}, "a ratio in (0, 1] or a whole number of tokens"),
        ("budgets", {"gpt-4o": 1.5}, "a ratio in (0, 1] or a whole number of tokens"),
        ("budgets", {"no-such-model": 0.5}, "no-such-model"),
        ("compressor", "zip", "'chain', 'structured', 'extractive', 'truncate' or 'off'"),
        ("summary", "llm", "'extractive' or 'off'"),
        ("policy", "fifo", "'hybrid' or 'token_window'"),
        ("workers", 0, "greater than or equal to 1"),
    ],
)
def test_bad_settings_fail_at_start_up_with_a_clear_message(
    field: str, value: Any, says: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(says)):
        Settings(**{field: value})


@pytest.mark.parametrize(
    ("value", "mode"),
    [("upstream", "upstream"), ("storage", "storage"), ("true", "storage"), ("false", "off")],
)
def test_redact_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, mode: str
) -> None:
    monkeypatch.setenv("CTXWINDOW_REDACT", value)
    assert Settings().redact == mode


def test_the_rate_limit_is_counted_in_the_stores_redis_by_default() -> None:
    redis_store = Settings(store="redis://127.0.0.1:6379/0")
    assert redis_store.rate_limit_redis() == "redis://127.0.0.1:6379/0"
    assert Settings(store="redis://h/0", rate_limit_url="local").rate_limit_redis() is None
    assert Settings(store="memory://").rate_limit_redis() is None
    other = Settings(store="memory://", rate_limit_url="redis://h:6380/1")
    assert other.rate_limit_redis() == "redis://h:6380/1"
    with pytest.raises(ValueError, match="rate_limit_url: rate_limit_url must be") as bad:
        load_settings(rate_limit_url="http://user:secret@x", store="redis://:hunter2@h:bad/0")
    assert "secret" not in str(bad.value) and "hunter2" not in str(bad.value)


def test_several_workers_need_a_store_they_can_share(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="in-memory store lives in one process"):
        Settings(store="memory://", workers=2)
    settings = Settings(data_dir=tmp_path, workers=2, upstream_api_key="sk-worker")
    again = Settings(**json.loads(settings.for_workers()))
    assert again == settings  # what each worker builds its app from
    assert again.upstream_api_key is not None
    assert again.upstream_api_key.get_secret_value() == "sk-worker"


def test_budgets_per_model() -> None:
    settings = Settings(budgets={"gpt-4o": 0.5, "gpt-4": 2000, "gpt-4o-mini": 10**9})
    assert settings.budget_for("gpt-4o") == 64_000
    assert settings.budget_for("gpt-4o", max_tokens=1000) == 63_000
    assert settings.budget_for("gpt-4", max_tokens=1000) == 2000  # tokens: as given
    assert settings.budget_for("gpt-4o-mini", max_tokens=8000) == 128_000 - 8000  # capped
    assert settings.budget_for("gpt-3.5-turbo") == int(16_385 * 0.75)  # budget_ratio


def test_config_file_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"port": 9100, "store": "memory://", "host": "localhost"}))
    settings = load_settings(config, port=9200, host=None)
    assert (settings.port, settings.store, settings.host) == (9200, "memory://", "localhost")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_toml_config(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('port = 9300\nupstream = "http://127.0.0.1:1/v1"\n')
    assert load_settings(config).port == 9300


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_hosts_need_no_keys(host: str) -> None:
    Settings(host=host).check_bind()


def test_public_host_without_api_keys_is_refused() -> None:
    """``serve`` refuses before starting anything; with keys it is allowed."""
    with pytest.raises(ValueError, match=r"refusing to listen on '0\.0\.0\.0' without API keys"):
        serve_command(host="0.0.0.0", store="memory://")
    Settings(host="0.0.0.0", api_keys={"k": "t"}).check_bind()


@pytest.fixture
def thresholds() -> Any:
    """The collector's thresholds, put back after the test."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_service_process_collects_at_its_own_thresholds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thresholds: Any, workers: int
) -> None:
    """The process that serves (the command's, or each worker's) runs the cyclic collector
    at ``GC_THRESHOLD``; building the app alone, as an app that mounts it does, leaves the
    process's thresholds as they were."""
    import uvicorn

    gc.set_threshold(700, 10, 10)
    settings = Settings(data_dir=tmp_path, workers=workers)
    app = main.prepare(settings)
    assert gc.get_threshold() == (700, 10, 10)
    seen: list[tuple[int, ...]] = []

    def serving(target: Any, **options: Any) -> None:
        if options.get("factory"):  # a worker builds its app from the environment
            assert target == "ctxwindow.server.main:app_from_environment"
            gc.set_threshold(700, 10, 10)  # a new process starts at Python's
            assert main.app_from_environment() is not None
        seen.append(gc.get_threshold())

    monkeypatch.setattr(uvicorn, "run", serving)
    # what ``run`` sets for the process, undone after: the workers' settings, the deadlines
    monkeypatch.setenv(main.WORKER_SETTINGS, "")
    for deadline in ("header_timeout", "body_timeout"):
        protocol = http.TimedH11Protocol
        monkeypatch.setattr(protocol, deadline, getattr(protocol, deadline))
    main.run(settings, app)
    assert seen == [main.GC_THRESHOLD]
