"""`make demo` then `make test`, as the README orders them, on a machine without CJK fonts yet.

`make demo` draws charts, so matplotlib writes its font list to the user's
cache. On a fresh machine that happens before `make test` installs the CJK and
emoji fonts (tools/install-browser), and matplotlib never rebuilds a list on
its own: the report tests, which draw Chinese and Japanese names, would find
no font for them (MissingFontWarning, an error under the suite's settings).
`make test` therefore runs pytest with a font list of its own. Here a stale
list (the fonts of this machine minus every CJK one) sits in the user's cache,
as `make demo` leaves it; pytest, run exactly as `make test` runs it, passes
the report test, and the same test without the Makefile's setting fails.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parent.parent
REPORT_TEST = "tests/test_eval_report.py::test_writes_json_charts_and_html"

STALE_FONT_LIST = textwrap.dedent(
    """
    import json, pathlib
    import matplotlib
    from matplotlib import font_manager as fm
    manager = fm.fontManager
    manager.ttflist = [f for f in manager.ttflist if "CJK" not in f.name]
    path = pathlib.Path(matplotlib.get_cachedir()) / f"fontlist-v{fm.FontManager.__version__}.json"
    fm.json_dump(manager, path)
    print(path)
    """
)


def _pytest_command() -> str:
    """The line of `make test`'s recipe that runs pytest, as make would run it."""
    recipe = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    (line,) = [line for line in recipe.splitlines() if " -m pytest" in line]
    return line


def _run(command: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPL", "XDG_", "PYTEST"))}
    env["HOME"] = str(home)
    return subprocess.run(
        ["bash", "-c", f"{command} -q -p no:cacheprovider {shlex.quote(REPORT_TEST)}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_make_test_does_not_read_the_font_list_make_demo_left(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPL", "XDG_"))}
    made = subprocess.run(
        [sys.executable, "-c", STALE_FONT_LIST], env={**env, "HOME": str(home)},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(made.stdout.strip()).is_relative_to(home / ".cache")

    command = _pytest_command()
    assert "MPLCONFIGDIR=" in command
    passed = _run(command, home)
    assert passed.returncode == 0, passed.stdout + passed.stderr

    # the control: pytest alone reads the stale list and the report test fails
    alone = _run(command.split("MPLCONFIGDIR=", 1)[1].split(" ", 1)[1], home)
    assert alone.returncode != 0
    assert "MissingFontWarning" in alone.stdout + alone.stderr
