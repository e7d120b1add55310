"""Invalid requests in Hypothesis-built contexts, per protocol and path (issue 28).

The checks of tests/test_valid_paths.py at scale: Hypothesis draws conversations and
budgets (tests/support/conversations.py), each is replayed through every path
(tests/support/paths.py, tests/support/adapter_paths.py), and every context a path builds
is checked with ``ctxwindow.validate`` in each protocol the path serves. Each protocol gets
at least ``--examples`` contexts, shared evenly among the paths that serve it (Responses
has one: the Agents session), so one run prints the issue's "0 invalid in >= 10,000
contexts per protocol across all paths".

Beside the counts, per path: refusals (a documented ``BudgetError`` instead of a
context), contexts with nothing of the conversation (every turn too large), calls waiting
for results that were left out although they fit, and errors (an exception the path
should not raise; its replay stops there). A script, not a test: nothing fails on a
figure. Offline; the default run (4,000 conversations, the Agents session's share
setting the pace) takes 2.5 to 3.5 minutes on 2 shared cores.

    python benchmarks/bench_valid.py [--examples 10000] [--paths TokenWindow,hybrid] [--seed 0]
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections import Counter
from pathlib import Path as FilePath

from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(FilePath(__file__).resolve().parent.parent))  # the tests' support

from tests.support.adapter_paths import ADAPTER_PATHS
from tests.support.conversations import Conversation, with_budgets
from tests.support.paths import LIBRARY_PATHS, Path, Sent, empty, lost_pending, violations

from ctxwindow.validate import PROTOCOLS, Violation

PATHS: dict[str, Path] = {**LIBRARY_PATHS, **ADAPTER_PATHS}
BATCH = 200  # conversations a Hypothesis run draws (each run starts from small ones)
EVENTS = ("refused", "empty", "lost pending", "errors")


class Tally:
    """What was checked: contexts and invalid ones per (protocol, path), the other events
    per path, the first violation of each rule per path, and each path's share."""

    def __init__(self, paths: dict[str, Path], examples: int) -> None:
        self.paths = paths
        serving = Counter(p for path in paths.values() for p in path.protocols)
        self.share = {p: math.ceil(examples / n) for p, n in serving.items()}
        self.contexts: Counter[tuple[str, str]] = Counter()
        self.invalid: Counter[tuple[str, str]] = Counter()
        self.events: Counter[tuple[str, str]] = Counter()
        self.first: dict[tuple[str, str], str] = {}
        self.conversations = 0

    def wanted(self, name: str) -> bool:
        """Whether a protocol of the path still lacks its share of contexts."""
        return any(self.contexts[p, name] < self.share[p] for p in self.paths[name].protocols)

    def done(self) -> bool:
        return not any(map(self.wanted, self.paths))

    def replay(self, name: str, conversation: Conversation, budget: int) -> None:
        """Every context the path builds for the conversation, counted."""
        try:
            for sent in self.paths[name].run(conversation, budget):
                self.count(name, conversation, sent)
        except Exception as exc:  # counted, shown, and the replay stops: the figure to fix
            self.events[name, "errors"] += 1
            self.first.setdefault((name, type(exc).__name__), f"{type(exc).__name__}: {exc}")

    def count(self, name: str, conversation: Conversation, sent: Sent) -> None:
        path = self.paths[name]
        if sent.refused is not None:
            self.events[name, "refused"] += 1
            return
        if empty(sent):
            self.events[name, "empty"] += 1
            return
        if path.holds_pending and lost_pending(conversation, sent):
            self.events[name, "lost pending"] += 1
        for protocol in path.protocols:
            self.contexts[protocol, name] += 1
            broken = violations(protocol, sent)
            self.invalid[protocol, name] += bool(broken)
            for violation in broken:
                self.note(name, violation)

    def note(self, name: str, violation: Violation) -> None:
        self.first.setdefault((name, violation.rule), str(violation))


def draw(tally: Tally, batch: int, at: int) -> None:
    """One Hypothesis run of ``batch`` conversations (seeded ``at``), each through the
    paths still wanting contexts."""

    @seed(at)
    @settings(
        max_examples=batch, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(drawn=with_budgets())
    def replay_all(drawn: tuple[Conversation, int]) -> None:
        conversation, budget = drawn
        tally.conversations += 1
        for name in tally.paths:
            if tally.wanted(name):
                tally.replay(name, conversation, budget)

    replay_all()


def report(tally: Tally, seconds: float) -> None:
    n = tally.conversations
    print(f"{n} conversations in {seconds:.0f} s ({seconds / max(n, 1):.2f} s each)")
    print(f"\n{'protocol':<20} {'path':<26} {'contexts':>9} {'invalid':>8}")
    for protocol in PROTOCOLS:
        for name, path in tally.paths.items():
            if protocol in path.protocols:
                n, bad = tally.contexts[protocol, name], tally.invalid[protocol, name]
                print(f"{protocol:<20} {name:<26} {n:>9} {bad:>8}")
    print(f"\n{'path':<26} " + " ".join(f"{event:>12}" for event in EVENTS))
    for name in tally.paths:
        print(f"{name:<26} " + " ".join(f"{tally.events[name, e]:>12}" for e in EVENTS))
    for (name, rule), example in sorted(tally.first.items()):
        print(f"first {rule} in {name}: {example[:300]}")
    print()
    for protocol, share in tally.share.items():
        print(verdict(tally, protocol, share))


def verdict(tally: Tally, protocol: str, share: int) -> str:
    """The protocol's line: contexts and invalid ones across its paths; PASS when none is
    invalid, each path had its share, and none lost a waiting call or raised."""
    names = [name for name, path in tally.paths.items() if protocol in path.protocols]
    n = sum(tally.contexts[protocol, name] for name in names)
    bad = sum(tally.invalid[protocol, name] for name in names)
    broke = sum(tally.events[name, e] for name in names for e in ("lost pending", "errors"))
    ok = bad == 0 and broke == 0 and n >= share * len(names)
    also = f", {broke} lost pending calls or errors" if broke else ""
    line = f"{protocol:<20} {'all paths':<26} {n:>9} contexts {bad:>6} invalid{also}"
    return f"{line}  {'PASS' if ok else 'MISS'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--examples", type=int, default=10_000, help="contexts per protocol, across the paths"
    )
    parser.add_argument("--paths", help="comma-separated path names (default: every path)")
    parser.add_argument("--seed", type=int, default=0, help="the first batch's Hypothesis seed")
    args = parser.parse_args()
    names = args.paths.split(",") if args.paths else list(PATHS)
    unknown = sorted(set(names) - set(PATHS))
    if unknown:
        parser.error(f"unknown paths {unknown}; known: {', '.join(PATHS)}")
    # A rolling summary with too little room logs a warning at each fold it cannot make
    # (documented: its batch stays evicted); at tiny budgets that is most folds.
    logging.getLogger("ctxwindow.policies").setLevel(logging.ERROR)
    tally = Tally({name: PATHS[name] for name in names}, args.examples)
    start, batches = time.perf_counter(), 0
    while not tally.done():
        draw(tally, BATCH, args.seed + batches)
        batches += 1
    report(tally, time.perf_counter() - start)


if __name__ == "__main__":
    sys.exit(main())
