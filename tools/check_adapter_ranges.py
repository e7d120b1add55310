"""Test each adapter at both ends of its extra's range: ``python tools/check_adapter_ranges.py``.

The extras ``langchain``, ``llamaindex`` and ``openai-agents`` of pyproject.toml
give each framework a range (``langchain-core>=1.4.0,<2``). For each extra this
installs ctxwindow with it twice, into throwaway virtual environments — once
with every package of the extra at its lower bound (read from pyproject.toml:
one source of truth), once at the newest versions the package registry has
within the range (resolved now) — and runs that adapter's test file in each.
It prints what each end installed and how its tests went, and exits 1 if any
end failed. ``make test`` runs it after the suite.

The environments are made by ``uv`` when it is installed (the ``test`` extra
brings it: seconds per environment, where pip takes about a minute), else by
``venv`` and pip. Two ends are tested at a time. The Hypothesis tests run with
the suite's ``dev`` profile: these runs check the frameworks' APIs, which the
suite's own run of the same tests, in CI depth, does not need again.

Options: ``--extra NAME`` (repeatable) checks only those extras; ``--end
lowest|newest`` only that end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

# extra -> (its adapter's test file, other extras that test file needs)
ADAPTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "langchain": ("tests/test_integration_langchain.py", ()),
    "llamaindex": ("tests/test_integration_llamaindex.py", ("llm",)),  # the openai SDK's types
    "openai-agents": ("tests/test_integration_openai_agents.py", ()),
}
TEST_TOOLS = ("pytest", "hypothesis")  # taken from the test extra, with its bounds


@dataclass(frozen=True)
class End:
    """One end of an extra's range: what to install, and the test file to run."""

    extra: str
    name: str  # "lowest" or "newest"
    requirements: tuple[str, ...]
    test_file: str


@dataclass(frozen=True)
class Outcome:
    end: End
    passed: bool
    versions: str  # what was installed: "langchain 1.3.0, langchain-core 1.4.0"
    log: list[str]


def extras(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, list[str]]:
    with pyproject.open("rb") as file:
        return dict(tomllib.load(file)["project"]["optional-dependencies"])


def lower_bound(requirement: str) -> str:
    """``name==X`` for a requirement ``name>=X,...``; an error if it has no ``>=``."""
    parsed = Requirement(requirement)
    lows = [spec.version for spec in parsed.specifier if spec.operator == ">="]
    if len(lows) != 1:
        raise SystemExit(f"pyproject.toml: {requirement!r} needs one lower bound (>=X)")
    return f"{parsed.name}=={lows[0]}"


def ends(extra: str, declared: dict[str, list[str]]) -> list[End]:
    """The lowest and the newest end of ``extra``: ctxwindow with the extra (and those its
    tests need), pytest and Hypothesis as the test extra bounds them, and for the lowest
    end each of the extra's packages pinned at its lower bound."""
    test_file, also = ADAPTERS[extra]
    tools = [r for r in declared["test"] if Requirement(r).name in TEST_TOOLS]
    base = ("-e", f"{ROOT}[{','.join((extra, *also))}]", *tools)
    lowest = tuple(lower_bound(r) for r in declared[extra])
    return [
        End(extra, "lowest", (*base, *lowest), test_file),
        End(extra, "newest", base, test_file),
    ]


def installer(venv: Path) -> tuple[list[str], list[str]]:
    """The commands that make ``venv`` and install into it: uv's if it is there, else pip's."""
    python = str(venv / "bin" / "python")
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv:
        return (
            [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", python],
        )
    return [sys.executable, "-m", "venv", str(venv)], [python, "-m", "pip", "install", "--quiet"]


def check(end: End, workdir: Path) -> Outcome:
    """Install ``end`` into a new environment under ``workdir`` and run its test file."""
    venv = workdir / f"{end.extra}-{end.name}"
    log = workdir / f"{end.extra}-{end.name}.log"
    make, install = installer(venv)
    python = str(venv / "bin" / "python")
    pytest = [python, "-m", "pytest", end.test_file, "-q", "-p", "no:cacheprovider"]
    with log.open("w") as out:
        passed = _run(make, out) and _run([*install, *end.requirements], out)
        versions = _versions(python, end.extra) if passed else "not installed"
        passed = passed and _run(pytest, out, env=_test_env())
    return Outcome(end, passed, versions, log.read_text("utf-8", "replace").splitlines())


def _run(command: list[str], out: IO[str], env: dict[str, str] | None = None) -> bool:
    out.write(f"$ {' '.join(command)}\n")
    out.flush()
    done = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    return done.returncode == 0


def _test_env() -> dict[str, str]:
    """This environment without ``CI``: Hypothesis's dev profile (see the docstring)."""
    return {name: value for name, value in os.environ.items() if name != "CI"}


def _versions(python: str, extra: str) -> str:
    names = [Requirement(r).name for r in extras()[extra]]
    code = "import importlib.metadata as m, sys\nfor n in sys.argv[1:]: print(n, m.version(n))"
    done = subprocess.run([python, "-c", code, *names], capture_output=True, text=True)
    return ", ".join(done.stdout.splitlines()) or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", action="append", choices=sorted(ADAPTERS))
    parser.add_argument("--end", choices=("lowest", "newest"))
    args = parser.parse_args(argv)
    declared = extras()
    todo = [
        end
        for extra in args.extra or sorted(ADAPTERS)
        for end in ends(extra, declared)
        if args.end in (None, end.name)
    ]
    with (
        tempfile.TemporaryDirectory(prefix="ctxwindow-ranges-") as tmp,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        outcomes = list(pool.map(lambda end: check(end, Path(tmp)), todo))
    for o in outcomes:
        if not o.passed:
            print(f"--- {o.end.extra}, {o.end.name} end: the last lines of its log", *o.log[-40:],
                  sep="\n")  # fmt: skip
    for o in outcomes:
        result = o.log[-1] if o.log else ""
        print(f"{o.end.extra:14} {o.end.name:7} {'ok' if o.passed else 'FAILED':7}"
              f"{o.versions}: {result}")  # fmt: skip
    failed = sum(not o.passed for o in outcomes)
    print(f"ranges: {len(outcomes) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
