"""A Redis Cluster of the tests' own: 3 primaries and 3 replicas on free ports.

``cluster_url()`` starts one per test process (the store cases ``redis-cluster-sync`` and
``redis-cluster-async`` share it) and stops it at exit; a fault test that kills a primary
starts its own with ``OwnCluster``::

    with OwnCluster(tmp_path) as cluster:
        store = RedisStore(cluster.url)
        cluster.kill_primary_of(key)        # kill -9; its replica takes over
        cluster.wait_healthy()

Each node is an ``OwnRedis`` started with ``--cluster-enabled yes``; ``redis-cli
--cluster create`` joins them and assigns the slots. The node timeout is 1 s, so a
replica takes over a killed primary within a few seconds. Without ``redis-server`` and
``redis-cli`` on the PATH the store cases skip (or fail under ``CTXWINDOW_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from tests.support.own_servers import OwnRedis, find_redis_server, free_port
from tests.support.stores import no_server

NODE_TIMEOUT_MS = 1000
HEALTHY_TIMEOUT = 30.0  # seconds for the cluster to agree on its slots (or a failover)


class ClusterNode(OwnRedis):
    """One node of a cluster: a ``redis-server`` in cluster mode, nothing saved."""

    name = "redis-server (cluster node)"

    def __init__(self, directory: Path) -> None:
        # The cluster bus: a port of its own (by default the port + 10000, which may be
        # taken, or past 65535).
        self.bus_port = free_port()
        super().__init__(directory, save=False)

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--cluster-enabled", "yes",
            "--cluster-port", str(self.bus_port),
            "--cluster-config-file", str(self.directory / "nodes.conf"),
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--cluster-require-full-coverage", "no",
        ]  # fmt: skip

    def ask(self, *command: str) -> str:
        """The reply of ``redis-cli`` to ``command`` on this node, as text."""
        done = subprocess.run(
            [_redis_cli(), "-p", str(self.port), *command],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return done.stdout


class OwnCluster:
    """``primaries`` primaries with ``replicas`` replicas each, in ``directory``."""

    def __init__(self, directory: Path, *, primaries: int = 3, replicas: int = 1) -> None:
        self.nodes: list[ClusterNode] = []
        try:
            for n in range(primaries * (1 + replicas)):
                self.nodes.append(ClusterNode(directory / f"node{n}"))
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            create = ["--cluster", "create", *addresses, "--cluster-replicas", str(replicas)]
            done = subprocess.run(
                [_redis_cli(), *create, "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]}")
            self.wait_healthy()
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """The store URL: every node as a seed (the client finds the rest itself)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes[:3])

    def running(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.process is not None]

    def primaries(self) -> list[ClusterNode]:
        return [node for node in self.running() if "role:master" in node.ask("INFO", "replication")]

    def node_of(self, key: str) -> ClusterNode:
        """The primary that holds ``key``'s slot now."""
        slot = int(self.running()[0].ask("CLUSTER", "KEYSLOT", key).strip())
        for node in self.primaries():
            if _owns(node, slot):
                return node
        raise RuntimeError(f"no running primary serves slot {slot}")

    def replica_of(self, primary: ClusterNode) -> ClusterNode:
        for node in self.running():
            found = re.search(r"master_port:(\d+)", node.ask("INFO", "replication"))
            if found and int(found.group(1)) == primary.port:
                return node
        raise RuntimeError(f"the primary on port {primary.port} has no running replica")

    def move_slot_of(self, key: str) -> ClusterNode:
        """Move ``key``'s slot, with its keys, to another primary (``CLUSTER SETSLOT`` and
        ``MIGRATE``, as ``redis-cli --cluster reshard`` does); the primary it went to.
        Clients that knew the old owner get MOVED (or ASK, while it moves)."""
        slot = self.running()[0].ask("CLUSTER", "KEYSLOT", key).strip()
        source = self.node_of(key)
        target = next(node for node in self.primaries() if node is not source)
        source_id, target_id = (
            source.ask("CLUSTER", "MYID").strip(),
            target.ask("CLUSTER", "MYID").strip(),
        )
        target.ask("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.ask("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := source.ask("CLUSTER", "GETKEYSINSLOT", slot, "100").split():
            source.ask("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", *keys)
        for node in self.primaries():
            node.ask("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return target

    def kill_primary_of(self, key: str) -> ClusterNode:
        """kill -9 the primary holding ``key``; its replica takes over (``wait_healthy``)."""
        node = self.node_of(key)
        node.kill()
        return node

    def wait_healthy(self, timeout: float = HEALTHY_TIMEOUT) -> None:
        """Until every running node says ``cluster_state:ok`` and sees every slot served by
        a running primary (after a kill: once a replica has taken over), and every replica
        has its primary's data (one that never had it would not take over)."""
        deadline = time.monotonic() + timeout
        while True:
            ports = {node.port for node in self.running()}
            views = [node.ask("CLUSTER", "NODES") for node in self.running()]
            states = [node.ask("CLUSTER", "INFO") for node in self.running()]
            ok = all("cluster_state:ok" in s and "cluster_slots_ok:16384" in s for s in states)
            roles = [node.ask("INFO", "replication") for node in self.running()]
            synced = all("role:master" in r or "master_link_status:up" in r for r in roles)
            if ok and synced and all(_served_by(view, ports) for view in views):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster is not healthy after {timeout} s: {states}")
            time.sleep(0.1)

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> OwnCluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _owns(node: ClusterNode, slot: int) -> bool:
    """Whether ``node``'s own view of the cluster gives it ``slot`` (``CLUSTER NODES``)."""
    for line in node.ask("CLUSTER", "NODES").splitlines():
        fields = line.split()
        if len(fields) < 8 or "myself" not in fields[2]:
            continue
        for span in fields[8:]:
            if span.startswith("["):  # a slot being migrated
                continue
            low, _, high = span.partition("-")
            if int(low) <= slot <= int(high or low):
                return True
    return False


def _served_by(view: str, ports: set[int]) -> bool:
    """Whether, in one node's ``CLUSTER NODES``, every primary holding slots is one of
    ``ports`` and not marked failing."""
    for line in view.splitlines():
        fields = line.split()
        if len(fields) < 9 or "master" not in fields[2]:
            continue
        port = int(fields[1].split("@")[0].rpartition(":")[2])
        if port not in ports or "fail" in fields[2]:
            return False
    return True


@functools.cache
def _redis_cli() -> str:
    return shutil.which("redis-cli") or "redis-cli"


@functools.cache
def cluster_url() -> str:
    """The URL of the shared test cluster, started at the first call, stopped at exit."""
    if find_redis_server() is None or shutil.which("redis-cli") is None:
        no_server("a Redis Cluster needs redis-server and redis-cli on the PATH")
    directory = Path(tempfile.mkdtemp(prefix="ctxwindow-cluster-"))
    try:
        cluster = OwnCluster(directory)
    except (RuntimeError, OSError) as exc:
        no_server(f"could not start a Redis Cluster: {exc}")
        raise
    atexit.register(cluster.close)
    atexit.register(shutil.rmtree, directory, True)
    return cluster.url
