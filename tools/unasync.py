"""Write the sync twins of the async sources: ``python tools/unasync.py [--check] [SOURCE…]``.

The async code is written once (``*/aio.py``); this pass writes its sync
twin token by token, the way httpcore's ``unasync`` and psycopg's
``async_to_sync`` do, keeping comments, docstrings and layout:

- ``async def`` / ``async with`` / ``async for`` lose ``async``; ``await x``
  becomes ``x``;
- an ``.asyncio`` attribute step disappears (``redis.asyncio.Redis`` ->
  ``redis.Redis``);
- names are renamed by ``NAMES`` (``AsyncStore`` -> ``Store``, ``aio`` ->
  ``sync``, ...), in code and, for the ``Async…`` names, in strings too;
- a ``# unasync: async only`` line starts a block (ended by ``# unasync: end``)
  that the sync twin leaves out; a ``# unasync: sync only`` block holds
  commented-out lines (``# code``) that only the sync twin has, uncommented
  (e.g. a constructor that opens the store, which an async one cannot do).

The output is then sorted and formatted by ruff, so it reads like the rest of
the code. Real differences between the flavours live in one seam,
``ctxwindow.concurrency.aio`` / ``.sync``. ``--check`` exits 1 when a
generated file is stale (``make test`` runs it through tests/test_generated.py).
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "ctxwindow"

# (async source, generated sync twin), relative to src/ctxwindow
PAIRS = [
    ("stores/base/aio.py", "stores/base/sync.py"),
    ("stores/redis/aio.py", "stores/redis/sync.py"),
    ("stores/postgres/aio.py", "stores/postgres/sync.py"),
    ("stores/tiered/aio.py", "stores/tiered/sync.py"),
    ("context/archiver/aio.py", "context/archiver/sync.py"),
    ("context/aio.py", "context/manager.py"),
]

NAMES = {
    "aio": "sync",
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "AsyncGenerator": "Generator",
    "asynccontextmanager": "contextmanager",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "AsyncStore": "Store",
    "AsyncMemoryStore": "MemoryStore",
    "AsyncSQLiteStore": "SQLiteStore",
    "AsyncRedisStore": "RedisStore",
    "AsyncPostgresStore": "PostgresStore",
    "AsyncTieredStore": "TieredStore",
    "AsyncFillable": "Fillable",
    "AsyncContextManager": "ContextManager",
    "AsyncConnection": "Connection",
    "AsyncCursor": "Cursor",
    "AsyncLockConnection": "LockConnection",
    "AsyncLeases": "Leases",
    "open_async_store": "open_store",
}
_IN_STRINGS = re.compile(
    r"\b(" + "|".join(re.escape(k) for k in NAMES if k.startswith(("Async", "open_async"))) + r")\b"
)
_ONLY_ASYNC = "# unasync: async only"
_ONLY_SYNC = "# unasync: sync only"
_END = "# unasync: end"

HEADER = (
    "# Generated from src/ctxwindow/{source} by tools/unasync.py: do not edit.\n"
    "# Edit the async source, then run `python tools/unasync.py`.\n"
)


def _offsets(text: str) -> list[int]:
    starts, total = [0], 0
    for line in text.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def _edits(text: str) -> list[tuple[int, int, str]]:
    """(start, end, replacement) character spans that turn the async text into sync."""
    starts = _offsets(text)
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))

    def at(pos: tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    edits: list[tuple[int, int, str]] = []
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else tok
        prev = tokens[i - 1] if i else tok
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            edits.append((at(tok.start), at(nxt.start), ""))  # the keyword and its space
        elif tok.type == tokenize.NAME and tok.string == "asyncio" and prev.string == ".":
            edits.append((at(prev.start), at(tok.end), ""))
        elif tok.type == tokenize.NAME and tok.string in NAMES:
            edits.append((at(tok.start), at(tok.end), NAMES[tok.string]))
        elif tok.type == tokenize.STRING and _IN_STRINGS.search(tok.string):
            new = _IN_STRINGS.sub(lambda m: NAMES[m.group(1)], tok.string)
            edits.append((at(tok.start), at(tok.end), new))
    return edits


def _blocks(text: str) -> str:
    """Drop the async-only blocks and uncomment the sync-only ones (and their markers)."""
    out, block = [], None
    for line in text.splitlines(keepends=True):
        marker = line.strip()
        if marker in (_ONLY_ASYNC, _ONLY_SYNC) and block is None:
            block = marker
        elif marker == _END and block is not None:
            block = None
        elif block == _ONLY_SYNC:
            indent = line[: len(line) - len(line.lstrip())]
            if not marker.startswith("#"):
                raise SystemExit(f"a sync-only line must be commented out: {line!r}")
            out.append(indent + marker[2:] + "\n" if marker != "#" else "\n")
        elif block is None:
            out.append(line)
    return "".join(out)


def _ruff(args: list[str], text: str, target: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(target), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode not in (0, 1) or not done.stdout:
        raise SystemExit(f"ruff {' '.join(args)} failed on {target}: {done.stderr}")
    return done.stdout


def unasync(source: str, text: str, target: Path) -> str:
    """The sync twin of ``text`` (the async source at ``source``), sorted and formatted."""
    text = _blocks(text)
    for start, end, new in sorted(_edits(text), reverse=True):
        text = text[:start] + new + text[end:]
    text = HEADER.format(source=source) + text
    text = _ruff(["check", "--fix", "--select", "I,F401", "--quiet", "--exit-zero"], text, target)
    return _ruff(["format", "--quiet"], text, target)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    only = [arg for arg in argv if not arg.startswith("--")]  # sources to write (default: all)
    stale = []
    for source, twin in PAIRS:
        if only and source not in only:
            continue
        target = SRC / twin
        wanted = unasync(source, (SRC / source).read_text(encoding="utf-8"), target)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if wanted == current:
            continue
        stale.append(twin)
        if not check:
            target.write_text(wanted, encoding="utf-8")
    if check and stale:
        print(
            "stale generated files (run `python tools/unasync.py`): "
            + ", ".join(f"src/ctxwindow/{name}" for name in stale),
            file=sys.stderr,
        )
        return 1
    for name in [] if check else stale:
        print(f"wrote src/ctxwindow/{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
