"""Prometheus metrics, one registry per app (so apps and tests never share counters).

The metrics of a model carry two labels (``ModelLabels``): ``model``, the
registry entry the model resolved to, by a readable name (``gpt-4o``; a glob
without its wildcards: ``*llama-3.[123]*`` is ``llama-3.x``; ``unknown`` for a
name no entry matches), and ``model_sent``, the name the request sent. Names
are clients' input, so the series stay bounded: an entry labels the first
``NAMES_PER_ENTRY`` names sent for it in the process, later ones are ``other``.

>>> labels = ModelLabels(ModelRegistry(unknown="estimate"))
>>> labels.of("meta-llama/Llama-3.1-8B-Instruct")
('llama-3.x', 'meta-llama/Llama-3.1-8B-Instruct')
>>> labels.of("gpt-4o-2024-08-06")
('gpt-4o', 'gpt-4o-2024-08-06')
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ctxwindow.policies.explain import Report
from ctxwindow.tokens.models import FAMILIES, MODELS, ModelInfo
from ctxwindow.tokens.registry import ModelRegistry, is_glob

_TOKEN_BUCKETS = (256, 1024, 4096, 16384, 32768, 65536, 131072, 262144, 1048576)
NAMES_PER_ENTRY = 20  # model_sent values an entry (and "unknown") labels; then "other"
UNKNOWN = "unknown"  # the model label of names no entry matches
OTHER = "other"  # the model_sent label of names past an entry's NAMES_PER_ENTRY


class Metrics:
    """What the service counts: context sizes, what eviction saved, upstream health."""

    def __init__(
        self,
        redactor: Callable[..., Any] | None = None,
        queued: Callable[[], int] | None = None,
        models: ModelRegistry | None = None,
    ) -> None:
        self.model_labels = ModelLabels(models or ModelRegistry())
        self.registry = r = CollectorRegistry()
        self._count_contexts(r)
        self._count_upstream(r)
        if isinstance(getattr(redactor, "counts", None), Mapping):
            r.register(_Redactions(redactor))
        if queued is not None:
            r.register(_Queued(queued))
        r.register(_TimedOut())

    def _count_contexts(self, r: CollectorRegistry) -> None:
        """The contexts built: their sizes, what eviction saved, recall and compression."""
        self.prompt_tokens = Histogram(
            "ctxwindow_prompt_tokens", "Prompt tokens sent upstream", buckets=_TOKEN_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.tokens_saved = Histogram(
            "ctxwindow_tokens_saved", "Tokens of a context's history left out of it",
            buckets=_TOKEN_BUCKETS, registry=r,
        )  # fmt: skip
        self.evictions = Histogram(
            "ctxwindow_evicted_entries", "Entries evicted or summarized out of a context",
            buckets=(0, 1, 10, 100, 1000, 10000), registry=r,
        )  # fmt: skip
        self.recall_hits = Counter(
            "ctxwindow_recall_hits", "Archived entries recalled into contexts", registry=r
        )
        self.recall_latency = Histogram(
            "ctxwindow_recall_latency_seconds", "Time of one archive search for recall",
            registry=r,
        )  # fmt: skip
        self.compressions = Counter(
            "ctxwindow_compressions", "Messages compressed instead of evicted", registry=r
        )
        self.summary_updates = Counter(
            "ctxwindow_summary_updates", "Evicted turns folded into a rolling summary", registry=r
        )

    def _count_upstream(self, r: CollectorRegistry) -> None:
        """The upstream: its latency and failures, the prompt tokens it reported (cached ones
        too), and how its counts compare with ctxwindow's."""
        self.upstream_latency = Histogram(
            "ctxwindow_upstream_latency_seconds", "Upstream response time", registry=r
        )
        self.upstream_errors = Counter(
            "ctxwindow_upstream_errors", "Upstream failures by kind", ["kind"], registry=r
        )
        self.upstream_prompt_tokens = Counter(
            "ctxwindow_upstream_prompt_tokens",
            "Prompt tokens the upstream reported (usage), by model", MODEL_LABELS, registry=r,
        )  # fmt: skip
        self.cached_tokens = Counter(
            "ctxwindow_cached_tokens",
            "Of them, tokens the upstream served from its prompt cache (OpenAI's"
            " prompt_tokens_details.cached_tokens, Anthropic's cache_read_input_tokens)",
            MODEL_LABELS, registry=r,
        )  # fmt: skip
        self.count_ratios = Gauge(
            "ctxwindow_count_ratio",
            "Upstream usage.prompt_tokens over ctxwindow's count (median of recent replies)",
            MODEL_LABELS, registry=r,
        )  # fmt: skip

    def watch_slots(self, slots: Any) -> None:
        """Report ``slots`` (a ``server.slots.Slots``) at scrape time: held, limits, refused."""
        self.registry.register(_Slots(slots))

    def usage(self, info: ModelInfo, model: str, prompt: int, cached: int) -> None:
        """An upstream reply's prompt tokens, ``cached`` of them from its prompt cache, for a
        request that sent ``model`` (resolved to ``info``)."""
        labels = self.model_labels.of(model, info)
        self.upstream_prompt_tokens.labels(*labels).inc(prompt)
        self.cached_tokens.labels(*labels).inc(cached)

    def count_ratio(self, key: str, ratio: float) -> None:
        """Calibration's ratio for ``key``: an entry's name or glob (its ratio, shared by the
        names it matches: ``model_sent`` is empty), or a name no entry matches."""
        self.count_ratios.labels(*self.model_labels.of_key(key)).set(ratio)

    def event(self, name: str, value: float) -> None:
        """The context managers' ``on_event``: work done while building contexts."""
        if name == "compressed":
            self.compressions.inc(value)
        elif name == "summary_updated":
            self.summary_updates.inc(value)
        elif name == "recall_seconds":
            self.recall_latency.observe(value)

    def observe_context(self, report: Report, tokens: int) -> tuple[int, int]:
        """Record a built context; returns (evicted, recalled) entry counts.

        Reads the report's running totals, not its decision list: a request
        costs the same however long the session's eviction history is.
        """
        self.prompt_tokens.observe(tokens)
        self.evictions.observe(report.evicted_entries)
        self.tokens_saved.observe(report.evicted_tokens)
        self.recall_hits.inc(report.recalled_entries)
        return report.evicted_entries, report.recalled_entries


MODEL_LABELS = ("model", "model_sent")


class ModelLabels:
    """The ``model`` and ``model_sent`` labels of the models of ``registry`` (see the
    module docstring); the names sent are counted per process."""

    def __init__(self, registry: ModelRegistry, per_entry: int = NAMES_PER_ENTRY) -> None:
        self.registry = registry
        self.per_entry = per_entry
        self._entries: dict[str, str] | None = None  # an entry's name -> its label
        self._sent: dict[str, set[str]] = {}  # a model label -> the names it labels

    def of(self, model: str, info: ModelInfo | None = None) -> tuple[str, str]:
        """(model, model_sent) of a request that sent ``model`` (``info``: its entry, if
        resolved already; a name nothing matches is ``unknown``)."""
        info = info or self.registry.find(model)
        if info is None or info.source.startswith("default"):  # the estimator's default
            return UNKNOWN, self._sent_as(UNKNOWN, model)
        entry = self.entry(info.name)
        return entry, self._sent_as(entry, model)

    def of_key(self, key: str) -> tuple[str, str]:
        """The labels of calibration's ``key``: an entry's name (``model_sent`` empty), or a
        name no entry matches (calibrated by name)."""
        if key in self._labels():
            return self.entry(key), ""
        return UNKNOWN, self._sent_as(UNKNOWN, key)

    def entry(self, name: str) -> str:
        """The label of the entry named ``name`` (a name, or a glob made readable)."""
        return self._labels().get(name, name)

    def _sent_as(self, entry: str, model: str) -> str:
        seen = self._sent.setdefault(entry, set())
        if model not in seen and len(seen) >= self.per_entry:
            return OTHER
        seen.add(model)
        return model

    def _labels(self) -> dict[str, str]:
        """Every entry's label: its glob readable, unless that reads as another entry's."""
        if self._entries is None:
            builtin = [*MODELS, *FAMILIES] if self.registry.builtins else []
            names = list(dict.fromkeys([*self.registry.configured, *builtin]))
            readable = {name: _readable(name) for name in names}
            taken = Tally(readable.values())
            self._entries = {n: r if taken[r] == 1 else n for n, r in readable.items()}
        return self._entries


def _readable(name: str) -> str:
    """A glob without its wildcards: the stars at its ends dropped, a character class or
    ``?`` written ``x``, a star inside ``…`` (``*qwen3*2507*``: ``qwen3…2507``)."""
    if not is_glob(name):
        return name
    text = re.sub(r"\[[^\]]*\]|\?", "x", name.strip("*")).replace("*", "…")
    return text or name


class _Redactions(Collector):
    """Reads the redactor's ``counts`` (type -> number) at scrape time."""

    def __init__(self, redactor: Any) -> None:
        self.redactor = redactor

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "ctxwindow_redactions", "Redacted spans by type", labels=["type"]
        )
        # Read at scrape time: a redactor may hand out a snapshot copy.
        for kind, n in sorted(dict(self.redactor.counts).items()):
            family.add_metric([str(kind)], n)
        yield family


class _Queued(Collector):
    """Turns waiting for the archive's background indexing, read at scrape time."""

    def __init__(self, queued: Callable[[], int]) -> None:
        self.queued = queued

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "ctxwindow_archive_queued",
            "Turns stored but not yet indexed by the archive (indexed in the background)",
            value=self.queued(),
        )


class _Slots(Collector):
    """The process's request slots (``server.slots``), read at scrape time."""

    def __init__(self, slots: Any) -> None:
        self.slots = slots

    def collect(self) -> Iterator[Metric]:
        slots = self.slots
        yield GaugeMetricFamily(
            "ctxwindow_upstream_calls", "Protocol requests under way in this process",
            value=slots.busy,
        )  # fmt: skip
        limits = GaugeMetricFamily(
            "ctxwindow_upstream_calls_limit", "Slots of the process, and of one tenant",
            labels=["scope"],
        )  # fmt: skip
        limits.add_metric(["process"], slots.total)
        limits.add_metric(["tenant"], slots.per_tenant)
        yield limits
        refused = CounterMetricFamily(
            "ctxwindow_upstream_busy", "Requests refused (429 upstream_busy), by whose limit",
            labels=["scope"],
        )  # fmt: skip
        for scope in ("process", "tenant"):
            refused.add_metric([scope], slots.refused[scope])
        yield refused


class _TimedOut(Collector):
    """Connections ``ctxwindow serve`` closed for a request's head or body sent too slowly
    (``server.http``; always 0 in an app served otherwise)."""

    def collect(self) -> Iterator[Metric]:
        from ctxwindow.server.http import TIMED_OUT

        family = CounterMetricFamily(
            "ctxwindow_request_timeouts",
            "Connections closed (408) for a request's head or body not sent in time",
            labels=["phase"],
        )  # fmt: skip
        for phase in ("head", "body"):
            family.add_metric([phase], TIMED_OUT[phase])
        yield family
