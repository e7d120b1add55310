"""Counting works on the first call with no network and an empty tiktoken cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.offline import NO_NETWORK

PROGRAM = (
    NO_NETWORK
    + """
from ctxwindow import count_tokens
messages = [{"role": "user", "content": "Hello 你好 🎉"}]
print(count_tokens(messages, model="gpt-4o"), count_tokens(messages, model="gpt-4"))
"""
)


def test_first_count_needs_no_network(tmp_path: Path) -> None:
    env = {"TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    gpt4o, gpt4 = map(int, result.stdout.split())
    assert gpt4o > 7 and gpt4 > 7
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").iterdir())
