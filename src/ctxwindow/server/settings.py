"""Server settings: from keyword arguments, ``CTXWINDOW_*`` environment variables or a file.

>>> s = Settings(data_dir="/srv/ctx")
>>> s.store_url()
'sqlite:////srv/ctx/sessions.db'
>>> s.budget_for("gpt-4o", max_tokens=1000)
95000
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from ctxwindow.stores.base import redact_url
from ctxwindow.tokens.registry import ModelRegistry, is_glob, read_config_file

LOOPBACK_NAMES = ("localhost",)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class Settings(BaseSettings):
    """Everything the service needs; validated when built (so at start-up)."""

    model_config = SettingsConfigDict(
        env_prefix="CTXWINDOW_", populate_by_name=True, extra="forbid", frozen=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # Worker processes (uvicorn); they share the store, so not with memory://.
    workers: int = Field(default=1, ge=1)
    data_dir: Path = Path(".")
    store: str | None = None  # a store URL; default sqlite:///<data_dir>/sessions.db
    upstream: str = "https://api.openai.com/v1"
    upstream_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("upstream_api_key", "CTXWINDOW_UPSTREAM_API_KEY"),
    )
    upstream_timeout: float = Field(default=60.0, gt=0)
    # How long a request waits while another request of the same session (in
    # any process sharing the store) is being answered; then 409 session_busy.
    lock_timeout: float = Field(default=90.0, ge=0)
    budget_ratio: float = Field(default=0.75, gt=0, le=1)
    # Per model (a name or a glob of model entries): a ratio of its context
    # window (0 < r <= 1) or a number of prompt tokens (> 1), instead of budget_ratio.
    budgets: dict[str, float] = {}
    # Models beyond the built-in ones (docs/models.md): a TOML or JSON file of
    # model entries (CTXWINDOW_MODEL_CONFIG, --model-config), entries given
    # here by name or glob (they win over the file's), and what a name nothing
    # matches gets: "refuse" (a 400 naming the way out) or "estimate" (the
    # estimator, X-Context-Estimated: true).
    # Default: the file's `unknown`, else "refuse".
    models_file: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("models_file", "model_config", "CTXWINDOW_MODEL_CONFIG"),
    )
    models: dict[str, dict[str, Any]] = {}
    unknown_models: Literal["refuse", "estimate"] | None = None
    # Estimated models: correct counts by the ratio of the upstream's
    # usage.prompt_tokens to ours, learnt per model and kept in the store.
    calibrate: bool = True
    # The window: "hybrid" (priorities, compression, rolling summary, recall)
    # or "token_window" (the newest turns that fit, oldest out; recall too).
    policy: Literal["hybrid", "token_window"] = "hybrid"
    # Compression before eviction (hybrid): structured JSON -> extractive ->
    # head/tail ("chain"), one of them alone, or "off".
    compressor: Literal["chain", "structured", "extractive", "truncate", "off"] = "chain"
    # The rolling summary of evicted turns (hybrid): "extractive" or "off".
    summary: Literal["extractive", "off"] = "extractive"
    # Keep the context's prefix the same between steps so the upstream's prompt cache
    # serves it: windows evict in steps, recalled turns stay put (docs/caching.md).
    prompt_cache: bool = True
    # Redact secrets (e-mails, phones, ID and card numbers, API keys, passwords,
    # IPs): "storage" masks every new message before it is stored (so also
    # before upstream); "upstream" stores messages as sent and masks what is
    # sent upstream; "off". true/false mean "storage"/"off".
    redact: Literal["off", "storage", "upstream"] = "off"
    # The archive that evicted turns go to and are recalled from: a SQLite
    # file path, a postgresql:// URL (shared by every machine), or "off".
    # Default: archive.db beside a SQLite store, else <data_dir>/archive.db.
    archive: str | None = None
    api_keys: dict[str, str] = {}  # API key -> tenant; empty: no auth, loopback only
    # With api_keys, GET /metrics needs one of them too, unless this opens it
    # (a scraper on a network of its own). /healthz and /readyz stay open.
    metrics_public: bool = False
    max_request_bytes: int = Field(default=1_000_000, ge=1)
    max_message_chars: int = Field(default=100_000, ge=1)
    max_messages_per_session: int = Field(default=10_000, ge=1)
    rate_limit_per_minute: int = Field(default=0, ge=0)  # per tenant; 0 = unlimited
    # Where the rate limit is counted: a redis:// URL shared by every process,
    # or "local" (each process counts its own). Default: the store's Redis
    # when the store is Redis, else local.
    rate_limit_url: str | None = None

    _registry: ModelRegistry = PrivateAttr()

    @field_validator("upstream")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"the upstream must be an http(s) URL, got {value!r}")
        return value.rstrip("/")

    @field_validator("redact", mode="before")
    @classmethod
    def _redact_mode(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "storage" if value else "off"
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return "storage" if value.lower() in ("true", "1", "yes") else "off"
        return value

    @field_validator("rate_limit_url")
    @classmethod
    def _redis_or_local(cls, value: str | None) -> str | None:
        if value is not None and value != "local" and not value.startswith(REDIS_SCHEMES):
            shown = redact_url(value)
            raise ValueError(f"rate_limit_url must be a redis:// URL or 'local', got {shown!r}")
        return value

    @model_validator(mode="after")
    def _models(self) -> Settings:
        """The model registry (every tokenizer file loaded now), then the budgets against it."""
        data: dict[str, Any] = {}
        base, where = None, None
        if self.models_file is not None:
            path = self.models_file.expanduser()
            data, base, where = read_config_file(path), path.resolve().parent, str(path)
        if self.models:
            data = {**data, "models": {**data.get("models", {}), **self.models}}
        registry = ModelRegistry.from_config(
            data, base=base, where=where, unknown=self.unknown_models
        )
        for model, budget in self.budgets.items():
            if not registry.matches(model):
                kind = "glob" if is_glob(model) else "name"
                raise ValueError(
                    f"budgets[{model!r}]: the {kind} matches no model entry (configured:"
                    f" {', '.join(registry.configured) or 'none'}; see docs/models.md)"
                )
            if not budget > 0 or (budget > 1 and budget != int(budget)):
                raise ValueError(
                    f"budgets[{model!r}] must be a ratio in (0, 1] or a whole number of"
                    f" tokens, got {budget!r}"
                )
        self._registry = registry
        return self

    @property
    def model_registry(self) -> ModelRegistry:
        """The models these settings serve: the built-ins and the configured entries."""
        return self._registry

    @field_validator("api_keys")
    @classmethod
    def _tenants(cls, value: dict[str, str]) -> dict[str, str]:
        for key, tenant in value.items():
            if not key or not tenant or ":" in tenant:
                raise ValueError("api_keys maps non-empty keys to tenant names without ':'")
        return value

    @model_validator(mode="after")
    def _store_opens(self) -> Settings:
        from ctxwindow.stores.url import SCHEMES

        scheme = self.store_url().partition(":")[0]
        if scheme not in SCHEMES:
            raise ValueError(f"unknown store URL scheme {scheme!r}; use one of {SCHEMES}")
        if self.workers > 1 and (scheme == "memory" or ":memory:" in self.store_url()):
            raise ValueError(
                "an in-memory store lives in one process: with several workers use a"
                " SQLite file, Redis or PostgreSQL"
            )
        return self

    def for_workers(self) -> str:
        """These settings as JSON for worker processes (the upstream key included)."""
        data = self.model_dump(mode="json", exclude={"upstream_api_key"})
        if self.upstream_api_key is not None:
            data["upstream_api_key"] = self.upstream_api_key.get_secret_value()
        return json.dumps(data)

    def archive_path(self) -> str | None:
        """Where the recall archive lives: ``archive``, else beside the store.

        ``archive.db`` beside a SQLite store, ``<data_dir>/archive.db`` for a
        server store, in memory with an in-memory store; None when ``"off"``.
        """
        if self.archive == "off":
            return None
        if self.archive is not None:
            if self.archive.startswith(("postgresql://", "postgres://")):
                return self.archive
            return str(Path(self.archive).expanduser())
        store = self.store_url()
        if store.startswith("memory:") or store in ("sqlite://", "sqlite:///:memory:"):
            return ":memory:"
        if store.startswith("sqlite:///"):
            return str(Path(store.removeprefix("sqlite:///").split("?")[0]).with_name("archive.db"))
        return str(self.data_dir.expanduser().resolve() / "archive.db")

    def rate_limit_redis(self) -> str | None:
        """The Redis URL the rate limit is counted in, or None for this process only."""
        url = self.rate_limit_url
        if url is None:
            store = self.store_url()
            return store if store.startswith(REDIS_SCHEMES) else None
        return None if url == "local" else url

    def store_url(self) -> str:
        if self.store is not None:
            return self.store
        path = self.data_dir.expanduser().resolve() / "sessions.db"
        return f"sqlite:///{path}"

    def budget_for(self, model: str, max_tokens: int = 0) -> int:
        """The prompt budget of a request to ``model`` that may answer ``max_tokens``.

        A ratio (``budgets[model]``, else ``budget_ratio``) of the context
        window minus ``max_tokens``; a number of tokens in ``budgets`` as
        given, but never more than the window minus ``max_tokens``.
        """
        window = self.model_registry.resolve(model).context_window
        budget = self._budget_setting(model)
        if budget > 1:
            return min(int(budget), window - max_tokens)
        return int(window * budget) - max_tokens

    def _budget_setting(self, model: str) -> float:
        """``budgets`` of ``model``: its name, else the longest glob matching it, else the ratio."""
        if model in self.budgets:
            return self.budgets[model]
        globs = [
            g for g in self.budgets if is_glob(g) and fnmatch.fnmatchcase(model.lower(), g.lower())
        ]
        if globs:
            return self.budgets[max(globs, key=len)]
        return self.budget_ratio

    def is_loopback(self) -> bool:
        if self.host in LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check_bind(self) -> None:
        """Refuse to serve without API keys on anything but loopback."""
        if not self.api_keys and not self.is_loopback():
            raise ValueError(
                f"refusing to listen on {self.host!r} without API keys: set"
                ' CTXWINDOW_API_KEYS=\'{"<key>": "<tenant>"}\' or bind to 127.0.0.1'
            )


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from a JSON or TOML file (if given), then the non-None ``overrides``.

    A bad value raises ``ValueError`` naming each field and what is wrong, but
    not the value given: it may be a URL with a password, or a key.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = _relative_to(Path(path).expanduser().resolve().parent, _read_config(Path(path)))
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings(**data)
    except ValidationError as exc:
        problems = "; ".join(_problem(error) for error in exc.errors())
        raise ValueError(f"invalid settings: {problems}") from None


def _problem(error: Any) -> str:
    """One validation error: ``field: what is wrong`` (a check of several fields: the check's
    own words, which name them)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {message}" if where else message


def _relative_to(folder: Path, data: dict[str, Any]) -> dict[str, Any]:
    """A settings file's relative model paths (its model config, tokenizers) read from its
    folder, not from wherever the service was started."""
    for key in ("models_file", "model_config"):
        if isinstance(data.get(key), str) and not Path(data[key]).expanduser().is_absolute():
            data[key] = str(folder / data[key])
    for entry in (
        (data.get("models") or {}).values() if isinstance(data.get("models"), dict) else ()
    ):
        tokenizer = entry.get("tokenizer") if isinstance(entry, dict) else None
        if isinstance(tokenizer, str) and not Path(tokenizer).expanduser().is_absolute():
            entry["tokenizer"] = str(folder / tokenizer)
    return data


def _read_config(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        loaded: Any = _toml(text)
    else:
        loaded = json.loads(text)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: a config file holds one object of settings")
    return loaded


__all__ = ["Settings", "load_settings"]


def _toml(text: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)
    raise ValueError("TOML config files need Python 3.11+; use JSON")
