"""The ``agent`` scenario: an operations agent's run with long JSON tool results, and
questions about the early results. Its English and Chinese texts are in ``agent_text``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ctxwindow.eval.builtin._chat import _ask_midway, _Chat, _generate, _Question
from ctxwindow.eval.builtin._text import Slots, _code, _fill, _prose, _split
from ctxwindow.eval.builtin.agent_text import _AGENT_EN, _AGENT_ZH

_AGENT = {"en": _AGENT_EN, "zh": _AGENT_ZH}


_SERVICES = _split("checkout-api, search-svc, payments-gateway, user-profile, notify-worker")
_REGIONS = _split("eu-west-1, us-east-1, ap-southeast-1, us-west-2, eu-central-1")
_ERRORS = _split(
    "DB_POOL_EXHAUSTED, TLS_HANDSHAKE_TIMEOUT, OOM_KILLED, MIGRATION_LOCK_TIMEOUT, "
    "HEALTHCHECK_FAILED_503, IMAGE_PULL_BACKOFF"
)
_FLAGS = _split(
    "new_checkout_flow, async_receipts, cache_v2, strict_tls, rate_limit_v3, search_rerank, "
    "dark_mode_api, batch_writes, shadow_traffic, grpc_upstream, compression_zstd, "
    "retry_budget, bulk_export, pii_masking, geo_routing, early_hints, read_replicas, "
    "idempotency_keys, audit_log_v2, canary_metrics, queue_sharding, lazy_sessions, "
    "fast_refunds, edge_cache, otel_tracing, warm_pool, circuit_breaker, json_streaming, "
    "partial_responses, bot_filter"
)
_TABLES = _split("orders, sessions, payments, users, inventory, audit_log")
_ACTIONS = _split("list, get, search, update, export")
_DEPENDENCIES = _split("auth-svc, pricing-svc, redis-main, postgres-primary, kafka-events")
_LABELS = _split("deploy, latency, database, network, customer, infra, flaky-test, security")
_NUMBERS = [str(n) for n in range(3, 990, 7)]


class _Ops:
    """One agent run: the service under audit, and the tool results it sees."""

    def __init__(self, chat: _Chat) -> None:
        rng = chat.rng
        self.chat, self.rng, self.text = chat, rng, _AGENT[chat.lang]
        self.service = rng.choice(_SERVICES)
        major, minor, patch = rng.randint(1, 4), rng.randint(0, 30), rng.randint(1, 9)
        self.version = f"v{major}.{minor}.{patch}"
        self.previous = f"v{major}.{minor}.{patch - 1}"
        self.regions = rng.sample(_REGIONS, len(_REGIONS))
        self.hosts: list[str] = []
        self.slots: Slots = {
            "n": _NUMBERS,
            "ms": _NUMBERS,
            "k": ["2", "3", "4"],
            "table": _TABLES,
            "dep": _DEPENDENCIES,
            "lb": ["lb-public-1", "lb-public-2", "lb-internal"],
            "image": [f"registry.local/{self.service}"],
            "version": [self.version],
            "previous": [self.previous],
        }

    def stamp(self, minutes_ago: float) -> str:
        moment = self.chat.now - timedelta(minutes=minutes_ago)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def inventory(self, region: str, failing: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """Hosts of one region and, with ``failing``, the one host whose deploy failed."""
        rng = self.rng
        a, b, c = region.split("-")
        names = [f"{self.service.split('-')[0]}-{a}{b[0]}{c}-{n:02d}" for n in range(1, 40)]
        names = sorted(rng.sample(names, rng.randint(8, 17)))
        bad = rng.randrange(len(names)) if failing else -1
        hosts = [
            self._host(name, region, "failed" if i == bad else "") for i, name in enumerate(names)
        ]
        self.hosts += names
        payload = {"service": self.service, "region": region, "count": len(hosts), "hosts": hosts}
        return payload, hosts[bad] if failing else {}

    def _host(self, name: str, region: str, status: str) -> dict[str, Any]:
        rng = self.rng
        status = status or rng.choice(["ok"] * 6 + ["pending", "draining"])
        return {
            "host": name,
            "ip": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            "zone": f"{region}{rng.choice('abc')}",
            "version": self.version if status == "ok" else self.previous,
            "deploy_status": status,
            "uptime_h": rng.randint(1, 2000),
            "cpu_pct": round(rng.uniform(3, 95), 1),
            "mem_pct": round(rng.uniform(20, 90), 1),
            "last_deploy": self.stamp(rng.uniform(20, 600)),
            "remark": rng.choice(self.text.remarks[status]),
        }

    def logs(self, host: str, error: str | None) -> dict[str, Any]:
        """Recent log lines of a host; with ``error``, one ERROR line names it."""
        rng, text = self.rng, self.text
        count = rng.randint(18, 40)
        lines = []
        for i in range(count):
            warn = rng.random() < 0.15
            template = rng.choice(text.log_warn if warn else text.log_info)
            lines.append(
                {
                    "ts": self.stamp(120 - i * 100 / count),
                    "level": "WARN" if warn else "INFO",
                    "msg": _fill(template, rng, self.slots),
                }
            )
        if error is not None:
            at = rng.randint(count * 2 // 3, count)
            message = _fill(text.log_error, rng, self.slots, {"error": error})
            lines.insert(at, {"ts": lines[at - 1]["ts"], "level": "ERROR", "msg": message})
        return {"host": host, "lines": lines, "truncated": False}

    def metrics(self, metric: str, regions: Sequence[str]) -> dict[str, Any]:
        """A 6-hour series per region; p99 latency has one spike per region."""
        rng = self.rng
        start = self.chat.now - timedelta(hours=6)
        times = [(start + timedelta(minutes=15 * i)).strftime("%H:%M") for i in range(24)]
        series = []
        for region in regions:
            if metric == "p99_latency_ms":
                base = rng.randint(140, 420)
                values: list[float] = [base + rng.randint(-40, 60) for _ in times]
                values[rng.randrange(12, 24)] = base + rng.randint(300, 2200)
            else:
                values = [round(rng.uniform(0.2, 80), 2) for _ in times]
            points = [[t, v] for t, v in zip(times, values, strict=True)]
            series.append({"region": region, "peak": max(values), "points": points})
        return {"service": self.service, "metric": metric, "window": "6h", "series": series}

    def tickets(self, status: str, urgent: bool) -> tuple[dict[str, Any], str]:
        """Tickets and, with ``urgent``, the assignee of the single P1 among them."""
        rng, text = self.rng, self.text
        count = rng.randint(10, 22)
        p1 = rng.randrange(count) if urgent else -1
        taken: set[str] = set()
        topics: Slots = {"service": _SERVICES, "region": _REGIONS}
        tickets = [
            {
                "id": _code(rng, "OPS-####", taken),
                "title": _fill(rng.choice(text.tickets), rng, topics),
                "priority": "P1" if i == p1 else rng.choice(["P2", "P3", "P3", "P4"]),
                "status": status,
                "assignee": rng.choice(text.people),
                "created": self.stamp(rng.uniform(60, 20000)),
                "labels": rng.sample(_LABELS, rng.randint(1, 3)),
                "comments": rng.randint(0, 14),
            }
            for i in range(count)
        ]
        assignee = str(tickets[p1]["assignee"]) if urgent else ""
        return {"status": status, "count": count, "tickets": tickets}, assignee

    def config(self, service: str) -> tuple[dict[str, Any], str]:
        """A service's config and its database pool size."""
        rng = self.rng
        pool = rng.randint(20, 120)
        routes = [
            {
                "path": f"/api/v{rng.randint(1, 3)}/{rng.choice(_TABLES)}/{rng.choice(_ACTIONS)}",
                "timeout_ms": rng.choice([500, 1000, 2000, 5000]),
                "rate_limit_rps": rng.choice([50, 100, 200, 500, 1000]),
                "auth": rng.choice(["jwt", "mtls", "none"]),
            }
            for _ in range(rng.randint(10, 16))
        ]
        payload = {
            "service": service,
            "owner_team": rng.choice(self.text.teams),
            "note": self.text.config_note,
            "replicas": rng.randint(3, 24),
            "db": {
                "host": "postgres-primary.internal",
                "pool_size": pool,
                "timeout_ms": rng.choice([1000, 3000, 5000]),
                "max_idle": rng.randint(2, 10),
            },
            "cache": {"backend": "redis", "ttl_s": rng.choice([60, 300, 900]), "max_keys": 50000},
            "feature_flags": {
                f: rng.random() < 0.5 for f in rng.sample(_FLAGS, rng.randint(20, 30))
            },
            "routes": routes,
        }
        return payload, str(pool)

    def deploys(self) -> dict[str, Any]:
        rng, text = self.rng, self.text
        taken: set[str] = set()
        deploys = []
        for i in range(rng.randint(10, 20)):
            started = rng.uniform(600, 60000) - i
            deploys.append(
                {
                    "id": _code(rng, "dep-####", taken),
                    "version": f"{self.version.rsplit('.', 1)[0]}.{rng.randint(0, 9)}",
                    "started": self.stamp(started),
                    "finished": self.stamp(started - rng.uniform(3, 25)),
                    "status": rng.choice(["succeeded"] * 5 + ["rolled_back"]),
                    "by": rng.choice(text.people),
                    "changes": rng.randint(1, 40),
                    "note": rng.choice(text.deploy_notes),
                }
            )
        return {"service": self.service, "deploys": deploys}


@dataclass(frozen=True)
class _Call:
    """A tool call, its result, and the questions (with answers) asked about that result."""

    tool: str
    args: dict[str, Any]
    payload: dict[str, Any]
    asks: Sequence[tuple[str, str]] = ()


def _agent_facts(ops: _Ops) -> list[list[_Call]]:
    """The early tool calls the questions ask about, grouped by assistant message."""
    rng, q, region = ops.rng, ops.text.questions, ops.regions[0]
    inventory, bad = ops.inventory(region, failing=True)
    asks = [(q["host"], bad["host"])]
    if rng.random() < 0.5:
        asks.append((q["zone"], bad["zone"]))
    first = _Call("get_inventory", {"service": ops.service, "region": region}, inventory, asks)
    error = rng.choice(_ERRORS)
    logs = _Call(
        "fetch_logs",
        {"host": bad["host"], "since": "2h"},
        ops.logs(bad["host"], error),
        [(_fill(q["error"], rng, {}, {"host": bad["host"]}), error)],
    )
    kinds = rng.sample(["metrics", "tickets", "config"], rng.randint(2, 3))
    extras = [_extra_fact(ops, kind) for kind in kinds]
    groups = [[first], [logs]]
    if rng.random() < 0.5:
        groups.append(extras[:2])  # two calls in one assistant message
        extras = extras[2:]
    return groups + [[e] for e in extras]


def _extra_fact(ops: _Ops, kind: str) -> _Call:
    rng, q, region = ops.rng, ops.text.questions, ops.regions[0]
    if kind == "metrics":
        payload = ops.metrics("p99_latency_ms", [region, *rng.sample(ops.regions[1:], 3)])
        asked = rng.choice(payload["series"])
        question = _fill(q["latency"], rng, {}, {"region": asked["region"]})
        args = {"service": ops.service, "metric": "p99_latency_ms", "window": "6h"}
        return _Call("query_metrics", args, payload, [(question, str(asked["peak"]))])
    if kind == "tickets":
        tickets, assignee = ops.tickets("open", urgent=True)
        return _Call("list_tickets", {"status": "open"}, tickets, [(q["ticket"], assignee)])
    config, pool = ops.config(ops.service)
    question = _fill(q["pool"], rng, {}, {"service": ops.service})
    return _Call("get_config", {"service": ops.service}, config, [(question, pool)])


def _filler_call(ops: _Ops) -> _Call:
    rng = ops.rng
    kind = rng.choice(["inventory", "logs", "metrics", "deploys", "tickets", "config"])
    if kind == "inventory":
        region = rng.choice(ops.regions)
        args = {"service": ops.service, "region": region}
        return _Call("get_inventory", args, ops.inventory(region, failing=False)[0])
    if kind == "logs":
        host = rng.choice(ops.hosts)
        return _Call("fetch_logs", {"host": host, "since": "1h"}, ops.logs(host, None))
    if kind == "metrics":
        metric = rng.choice(["error_rate_pct", "cpu_pct", "mem_pct", "saturation_pct"])
        args = {"service": ops.service, "metric": metric, "window": "6h"}
        return _Call("query_metrics", args, ops.metrics(metric, rng.sample(ops.regions, 4)))
    if kind == "deploys":
        return _Call("list_deploys", {"service": ops.service}, ops.deploys())
    if kind == "tickets":
        return _Call("list_tickets", {"status": "closed"}, ops.tickets("closed", urgent=False)[0])
    service = rng.choice([s for s in _SERVICES if s != ops.service])
    return _Call("get_config", {"service": service}, ops.config(service)[0])


def _agent_steps(ops: _Ops, turns: int) -> Iterator[list[_Call]]:
    """The fact steps, then ``turns`` filler steps, each made only when it is written."""
    yield from _agent_facts(ops)
    for _ in range(turns):
        yield [_filler_call(ops) for _ in range(2 if ops.rng.random() < 0.25 else 1)]


def _agent(chat: _Chat, turns: int, filler: int) -> list[_Question]:
    rng = chat.rng
    ops = _Ops(chat)
    text = ops.text
    chat.say("system", text.system)
    task = {"service": ops.service, "version": ops.version, "region": ops.regions[0]}
    chat.say("user", _fill(rng.choice(text.tasks), rng, {}, task))
    questions = []
    for step, group in enumerate(_agent_steps(ops, turns)):
        if step > 3 and rng.random() < 0.2:
            chat.say("user", _fill(rng.choice(text.interjections), rng, {"region": _REGIONS}))
        ids = chat.call(*((c.tool, c.args) for c in group))
        for call_id, c in zip(ids, group, strict=True):
            result = chat.result(call_id, c.payload)
            questions += [_Question(q, a, [result], "tool-result") for q, a in c.asks]
        chat.say("assistant", _prose(rng, chat.lang, text.notes, filler))
    _ask_midway(chat, questions, rng.randint(1, 2))
    return questions


def generate_agent(
    lang: str = "en", *, conversations: int = 1, turns: int = 10, filler: int = 40, seed: int = 0
) -> dict[str, Any]:
    """An agent run with long JSON tool results; questions about the early results."""
    return _generate("agent", _agent, lang, conversations, turns, filler, seed)
