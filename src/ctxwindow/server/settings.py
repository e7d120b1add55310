"""Server settings: from keyword arguments, ``CTXWINDOW_*`` environment variables or a file.

>>> s = Settings(data_dir="/srv/ctx")
>>> s.store_url()
'sqlite:////srv/ctx/sessions.db'
>>> s.budget_for("gpt-4o", max_tokens=1000)
95000
"""

from __future__ import annotations

import difflib
import fnmatch
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
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
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from ctxwindow.configfile import read_table
from ctxwindow.stores.base import redact_url
from ctxwindow.tokens.registry import ModelRegistry, is_glob, read_config_file

LOOPBACK_NAMES = ("localhost",)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")


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
    # Recall by meaning beside words: "default" fuses the packaged embedder's
    # cosine (multilingual-e5-small, the `dense` extra that `server` brings)
    # with BM25 when it is installed, else words alone; "off": words alone.
    embedder: Literal["default", "off"] = "default"
    # Cores one embedding call may use (a request's question, the archive's batch);
    # 0: the machine's cores shared out among the workers (at least one each).
    # One costs the least CPU; more answer a question a little sooner (docs/server.md).
    embedder_threads: int = Field(default=1, ge=0)
    api_keys: dict[str, str] = {}  # API key -> tenant; empty: no auth, loopback only
    # With api_keys, GET /metrics needs one of them too, unless this opens it
    # (a scraper on a network of its own). /healthz and /readyz stay open.
    metrics_public: bool = False
    # The session inspector page at /ui/ (docs/inspector.md): static files that hold no
    # data, served without a key; its data comes from the API with the user's key.
    # false: /ui/ and its files are 404.
    ui: bool = True
    max_request_bytes: int = Field(default=1_000_000, ge=1)
    max_message_chars: int = Field(default=100_000, ge=1)
    max_messages_per_session: int = Field(default=10_000, ge=1)
    rate_limit_per_minute: int = Field(default=0, ge=0)  # per tenant; 0 = unlimited
    # Protocol requests one process serves at once (each holds a slot until its answer
    # is sent, its upstream call included; the upstream connection pool is sized to it),
    # and of them one tenant's. Over either: 429 upstream_busy with Retry-After.
    # Default per tenant: all of them with one tenant, else half (at least 1).
    max_upstream_calls: int = Field(default=100, ge=1)
    max_upstream_calls_per_tenant: int | None = Field(default=None, ge=1)
    # Seconds a client has to send a request's head (its line and headers), and then
    # its body; past them the connection gets a 408 and is closed (slow clients hold no
    # connection for long; `ctxwindow serve` and its workers only: an app you serve
    # yourself is your server's to bound).
    header_timeout: float = Field(default=10.0, gt=0)
    body_timeout: float = Field(default=30.0, gt=0)
    # Session ids in GET /v1/sessions (and the inspector's list): "plain" as the
    # clients wrote them; "redacted" through the redactor (an e-mail as an id shows
    # as [EMAIL]) with a handle ("ref") to open the session by; "hashed": the handle
    # alone. A handle is an HMAC of the id under listed_ids_key (needed for both;
    # every process sharing the store must use the same), and the /v1/sessions/{id}
    # routes take it in place of the id (docs/server.md, "Listing sessions").
    listed_ids: Literal["plain", "redacted", "hashed"] = "plain"
    listed_ids_key: SecretStr | None = None
    # Where the rate limit is counted: a redis:// URL shared by every process,
    # or "local" (each process counts its own). Default: the store's Redis
    # when the store is Redis, else local.
    rate_limit_url: str | None = None

    _registry: ModelRegistry = PrivateAttr()

    @field_validator("upstream")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"the upstream must be an http(s) URL, got {redact_url(value)!r}")
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
        registry = ModelRegistry.from_config(
            data, base=base, where=where, unknown=self.unknown_models
        ).with_entries(self.models)
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

    def upstream_calls_per_tenant(self) -> int:
        """Slots one tenant may hold (``max_upstream_calls_per_tenant``, or its default)."""
        total = self.max_upstream_calls
        if self.max_upstream_calls_per_tenant is not None:
            return min(self.max_upstream_calls_per_tenant, total)
        return total if len(set(self.api_keys.values())) <= 1 else max(1, total // 2)

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

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, value: str | None) -> str | None:
        from ctxwindow.stores.url import SCHEMES, path_hint

        scheme = (value or "sqlite:").partition(":")[0]
        if scheme not in SCHEMES:
            raise ValueError(
                f"unknown store URL scheme {scheme!r}; use one of {', '.join(SCHEMES)}"
                f"{path_hint(value or '')}"
            )
        return value

    @model_validator(mode="after")
    def _listing_key(self) -> Settings:
        key = self.listed_ids_key
        if self.listed_ids != "plain" and (key is None or len(key.get_secret_value()) < 16):
            raise ValueError(
                f"listed_ids={self.listed_ids!r} needs listed_ids_key (CTXWINDOW_LISTED_IDS_KEY):"
                " a secret of at least 16 characters, the same in every process"
            )
        return self

    @model_validator(mode="after")
    def _store_shared(self) -> Settings:
        url = self.store_url()
        if self.workers > 1 and (url.startswith("memory:") or ":memory:" in url):
            raise ValueError(
                "workers: an in-memory store lives in one process: with several workers use"
                " a SQLite file, Redis or PostgreSQL"
            )
        return self

    def embedding_threads(self) -> int:
        """The cores one embedding call may use: ``embedder_threads``, or for 0 the
        machine's cores (those this process may run on) over ``workers``, at least 1."""
        if self.embedder_threads:
            return self.embedder_threads
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return max(1, (cores or os.cpu_count() or 1) // self.workers)

    def for_workers(self) -> str:
        """These settings as JSON for worker processes (the upstream key included)."""
        secrets = ("upstream_api_key", "listed_ids_key")
        data = self.model_dump(mode="json", exclude=set(secrets))
        for name in secrets:
            value = getattr(self, name)
            if value is not None:
                data[name] = value.get_secret_value()
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
        from ctxwindow.stores.url import default_store_url

        return self.store if self.store is not None else default_store_url(self.data_dir)

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


def load_settings(
    path: str | Path | None = None, *, flags: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """Settings from a JSON or TOML file (if given), then the non-None ``overrides``.

    Any problem raises one ``ValueError`` line that says where the setting came
    from and what is wrong: ``server.toml: port: Input should be ...``,
    ``CTXWINDOW_PORT: ...``, ``--port: ...`` (``flags`` maps an override to
    the command-line flag it came from), or the field alone for a keyword.
    It never shows the value given: it may be a URL with a password, or a key.
    """
    data: dict[str, Any] = {}
    file = None
    if path is not None:
        file = Path(path).expanduser()
        data = _relative_to(file.resolve().parent, read_table(file, "settings"))
    given = {k: v for k, v in overrides.items() if v is not None}
    origins = _Origins(file, data, given, flags or {})
    try:
        return Settings(**{**data, **given})
    except ValidationError as exc:
        raise ValueError("; ".join(origins.problem(e) for e in exc.errors())) from None
    except SettingsError as exc:  # a CTXWINDOW_* variable that should hold JSON does not
        raise ValueError(origins.unparsable(exc)) from None


# Other names a setting is read under (in a file, or as an environment variable).
_ALIASES = {"model_config": "models_file", "CTXWINDOW_MODEL_CONFIG": "models_file"}
_ENV = {"models_file": "CTXWINDOW_MODEL_CONFIG"}
_LEADING_NAME = re.compile(r"[a-z_]+(?=[\[.:])")


@dataclass(frozen=True)
class _Origins:
    """Where each setting came from (a flag or keyword, the file, the environment), to say
    so in front of its problem."""

    file: Path | None
    data: Mapping[str, Any]
    given: Mapping[str, Any]
    flags: Mapping[str, str]

    def problem(self, error: Any) -> str:
        """One validation error on one line, after where its setting came from."""
        message = str(error["msg"]).removeprefix("Value error, ")
        loc = [str(part) for part in error["loc"]]
        if error["type"] == "extra_forbidden":
            return self._unknown(loc[0])
        if not loc:  # a check of several fields: its message starts with the field's name
            found = _LEADING_NAME.match(message)
            label, named = self.origin(_ALIASES.get(found[0], found[0])) if found else (None, False)
            if named and found:  # "--workers: ...", not "--workers: workers: ..."
                message = message.removeprefix(f"{found[0]}: ")
            return f"{label}: {message}" if label else message
        field = _ALIASES.get(loc[0], loc[0])
        label, named = self.origin(field)
        where = ".".join([field, *loc[1:]])
        if label is None:
            return f"{where}: {message}"
        if named:  # the flag or the variable names the field already
            return ": ".join([label, *([".".join(loc[1:])] if loc[1:] else []), message])
        return f"{label}: {where}: {message}"

    def origin(self, field: str) -> tuple[str | None, bool]:
        """The label of where ``field`` came from, and whether that label names the field
        (a flag, a variable) or not (a file; a keyword argument has no label)."""
        if field in self.given:
            flag = self.flags.get(field)
            return flag, flag is not None
        names = [field, *(a for a, f in _ALIASES.items() if f == field)]
        if self.file is not None and any(name in self.data for name in names):
            return str(self.file), False
        variable = _env_name(field)
        if variable in {name.upper() for name in os.environ}:
            return variable, True
        return None, False

    def unparsable(self, exc: SettingsError) -> str:
        found = re.search(r'field "(\w+)"', str(exc))
        variable = _env_name(found[1]) if found else "a CTXWINDOW_* variable"
        reason = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return f"{variable}: not valid JSON{reason}"

    def _unknown(self, key: str) -> str:
        names = [*Settings.model_fields, *(a for a in _ALIASES if a.islower())]
        close = difflib.get_close_matches(key, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; the settings are in docs/server.md"
        where = f"{self.file}: " if self.file is not None and key in self.data else ""
        return f"{where}unknown setting {key!r}{hint}"


def _env_name(field: str) -> str:
    return _ENV.get(field, f"CTXWINDOW_{field.upper()}")


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


__all__ = ["Settings", "load_settings"]
