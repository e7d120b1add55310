"""tools/install-browser, run against stand-ins of dpkg-query and apt-get that record what
they are asked (the real ones would change the machine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "install-browser"


def stand_ins(tmp_path: Path, installed: bool, apt_fails_first: bool = False) -> dict[str, str]:
    """A PATH whose dpkg-query says the packages are (not) installed and whose apt-get,
    sudo and id log their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    status = "install ok installed" if installed else "unknown ok not-installed"
    scripts = {
        "dpkg-query": f"#!/bin/sh\nprintf '{status}'\n",
        "apt-get": (
            f"#!/bin/sh\necho \"apt-get $*\" >> {log}\n"
            + (f"if [ ! -e {tmp_path}/failed ]; then touch {tmp_path}/failed; exit 100; fi\n"
               if apt_fails_first else "")
            + "exit 0\n"
        ),
        "sudo": f"#!/bin/sh\necho \"sudo\" >> {log}\nexec \"$@\"\n",
        "id": "#!/bin/sh\necho 1000\n",  # not root: the script goes through sudo
    }  # fmt: skip
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )


def test_nothing_is_installed_when_everything_is_there(tmp_path: Path) -> None:
    done = run(stand_ins(tmp_path, installed=True))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "calls.log").exists()


@pytest.mark.parametrize("timeout", [None, "42"])
def test_apt_waits_for_the_dpkg_lock_instead_of_failing(
    tmp_path: Path, timeout: str | None
) -> None:
    env = stand_ins(tmp_path, installed=False)
    if timeout is not None:
        env["APT_LOCK_TIMEOUT"] = timeout
    done = run(env)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    installs = [c for c in calls if c.startswith("apt-get") and " install " in c]
    assert installs, calls
    assert all(f"-o DPkg::Lock::Timeout={timeout or 600}" in c for c in installs)
    assert "chromium fonts-noto-cjk fonts-noto-color-emoji pgbouncer" in installs[0]
    assert "sudo" in calls  # not root


def test_a_failed_install_updates_the_lists_and_tries_again(tmp_path: Path) -> None:
    done = run(stand_ins(tmp_path, installed=False, apt_fails_first=True))
    assert done.returncode == 0, done.stderr
    calls = [c for c in (tmp_path / "calls.log").read_text().splitlines() if c != "sudo"]
    assert [c.split()[3] for c in calls] == ["install", "update", "install"]
    assert all("DPkg::Lock::Timeout=600" in c for c in calls)
