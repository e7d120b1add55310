"""The sync twins are generated from their async sources (tools/unasync.py), never edited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "unasync.py"

sys.path.insert(0, str(TOOL.parent))
import unasync  # noqa: E402


def test_every_generated_file_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("source, twin", unasync.PAIRS)
def test_a_generated_file_says_so_and_names_its_source(source: str, twin: str) -> None:
    text = (ROOT / "src" / "ctxwindow" / twin).read_text(encoding="utf-8")
    assert text.startswith(f"# Generated from src/ctxwindow/{source} by tools/unasync.py")
    assert "async def" not in text and "await " not in text


def test_the_pass_turns_async_code_into_sync_code(tmp_path: Path) -> None:
    source = '''"""``AsyncStore`` things."""

from __future__ import annotations

import redis.asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ctxwindow.concurrency.aio import run_blocking


class AsyncThing:
    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        async with self.lock:  # a comment stays
            yield

    async def keys(self, client: redis.asyncio.Redis) -> list[bytes]:
        await run_blocking(print, "x")
        return [key async for key in client.scan_iter()]

    # unasync: async only
    def only_here(self) -> None:
        pass

    # unasync: end
    def __init__(self) -> None:
        self.client = None
        # unasync: sync only
        # self.open()
        # unasync: end

    async def aclose(self) -> None:
        await self.client.aclose()
'''
    out = unasync.unasync("x/aio.py", source, tmp_path / "x.py")
    code = out.split("\n", 2)[2]  # after the header, which names the async source
    assert "async" not in code and "await" not in code
    assert "from ctxwindow.concurrency.sync import run_blocking" in out
    assert "client: redis.Redis" in out and "import redis\n" in out
    assert "[key for key in client.scan_iter()]" in out
    assert "with self.lock:  # a comment stays" in out
    assert "@contextmanager" in out and "-> Iterator[None]" in out
    assert "only_here" not in out and "unasync:" not in out
    assert "        self.client = None\n        self.open()\n" in out
    assert "def close(self) -> None:\n        self.client.close()" in out
    assert '"""``Store`` things."""' in out
