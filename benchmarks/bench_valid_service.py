"""Upstream bodies of the service, checked by the thousand: the count issue 28 asks for.

For each protocol (Chat Completions, Responses, Anthropic Messages), Hypothesis draws
session programs in that protocol's format (tests/support/service_programs.py: CJK,
Japanese, emoji, long texts, images, tool loops of parallel calls with error results, a
client-written history, a system prompt, extended thinking or reasoning, budgets from
tiny to large, streamed and not) and runs them through the app in-process (ASGI, no
network) with the fake upstream of the protocol (tests/support/service_runs.py), half
under the hybrid policy (default settings, recall on), half under the token window,
until ``--bodies`` upstream bodies (default 10,000) per protocol have been checked with
``ctxwindow.validate``. It prints, per protocol and policy: programs, requests, bodies
checked, invalid bodies, refusals (a budget's, and any other: a request valid for the
provider that the service refused), refusals that left something behind (forwarded or
stored), errors, and the time; then the broken rules and the first example of each
problem. tests/test_server_valid_bodies.py runs the same as a property test.

    .venv/bin/python benchmarks/bench_valid_service.py              # 10,000 bodies a protocol
    .venv/bin/python benchmarks/bench_valid_service.py --bodies 600

Nothing here asserts a number; the last line says PASS when no body was invalid and no
refusal was the service's fault, else MISS.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.support.service_programs import PROTOCOLS, programs
from tests.support.service_runs import SETTINGS, Service, Tally, serving

CHUNK = 50  # programs a Hypothesis run draws; runs follow each other until enough bodies


def checked(served: Service, bodies: int) -> tuple[Tally, int, list[str]]:
    """Programs run on ``served`` until ``bodies`` upstream bodies are checked: the tally,
    the programs run, and the errors raised (a 5xx, a broken stream: the app's own)."""
    tally, runs, errors = Tally(), [0], []

    @settings(max_examples=CHUNK, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.data())
    def run(data: st.DataObject) -> None:
        program = data.draw(programs(served.protocol))  # drawn always: Hypothesis asks so
        if tally.bodies >= bodies:
            return
        runs[0] += 1
        try:
            served.run(program, tally)
        except Exception as exc:  # counted and shown, never stopping the count
            errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")

    while tally.bodies < bodies:
        run()
    return tally, runs[0], errors


def report(
    protocol: str, policy: str, tally: Tally, runs: int, errors: list[str], took: float
) -> None:
    budget = sum(tally.refused.values()) - len(tally.unexpected)
    print(
        f"{protocol:<19} {policy:<13} {runs:>6} {tally.requests:>8} {tally.bodies:>7}"
        f" {len(tally.invalid):>7} {budget:>8} {len(tally.unexpected):>6} {len(tally.leaked):>6}"
        f" {len(errors):>6} {took:>7.1f}s"
    )


def examples(tally: Tally, errors: list[str]) -> list[str]:
    """One line per kind of problem: each broken rule (count, first message), the first
    refusal of each other kind, the first error."""
    rules = Counter(v.rule for _, _, found in tally.invalid for v in found)
    first = {v.rule: str(v) for _, _, found in reversed(tally.invalid) for v in found}
    lines = [f"  invalid  {n:>5} x {first[rule]}" for rule, n in rules.most_common()]
    for kind, found in (
        ("left behind", tally.leaked),
        ("refused", tally.unexpected),
    ):
        if found:
            lines.append(f"  {kind}  {len(found)} x, first: {found[0][1]} {found[0][2][:200]}")
    if errors:
        lines.append(f"  error  {len(errors)} x, first: {errors[0]}")
    return lines


def main() -> None:
    # The fakes' usage is not a count of what they got: calibration's warning is noise here.
    logging.getLogger("ctxwindow.server").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bodies", type=int, default=10_000,
                        help="upstream bodies to check per protocol (default 10,000)")  # fmt: skip
    parser.add_argument("--protocol", choices=PROTOCOLS, action="append",
                        help="only this protocol (repeatable; default all three)")  # fmt: skip
    args = parser.parse_args()
    print(f"{'protocol':<19} {'policy':<13} {'progs':>6} {'requests':>8} {'bodies':>7}"
          f" {'invalid':>7} {'budget':>8} {'other':>6} {'left':>6} {'errors':>6}"
          f" {'time':>8}")  # fmt: skip
    problems: list[str] = []
    for protocol in args.protocol or PROTOCOLS:
        for policy in SETTINGS:
            started = time.perf_counter()
            with serving(protocol, policy) as served:
                tally, runs, errors = checked(served, -(-args.bodies // len(SETTINGS)))
            report(protocol, policy, tally, runs, errors, time.perf_counter() - started)
            found = examples(tally, errors)
            problems += [f"{protocol} {policy}:", *found] if found else []
    if problems:
        print("\n".join(problems))
    print("PASS: every body valid, no refusal the service's fault" if not problems else "MISS")


if __name__ == "__main__":
    main()
