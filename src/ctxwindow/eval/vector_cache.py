"""Vectors kept between runs of the eval: a text is embedded once per model, not once a run.

``ctxwindow eval`` embeds every turn and question of its datasets (the
hybrid's archive, and the dense baselines); with the default embedder that is
most of a run (docs/eval.md has the figures). ``CachedEmbedder`` wraps a model
so that a text is embedded once per form (query, passage or symmetric) in a
process, and, where the model has a ``cache_key``, once ever: the vectors go
to ``VectorCache``, a SQLite file read by the next run.

The key of a vector is the model's ``cache_key`` (the packaged models give
their name, the version of the package that computes them and the length
they cut texts at), its form and the SHA-256 of the text. An embedder without
a ``cache_key`` (a user's own) is kept in memory only: whether its vectors
are still what it computes is for it to say.

The file (``cache_path``) is ``$CTXWINDOW_EMBEDDING_CACHE``, else
``embeddings.sqlite3`` in ``$XDG_CACHE_HOME/ctxwindow`` (``~/.cache``);
``off`` in the variable, or ``ctxwindow eval --no-embedding-cache``, keeps
nothing. The eval's worker processes read and write it at once (WAL, a
connection per process, opened where it is used). A file that cannot be
opened, read or written turns the cache off for the rest of the run, with a
warning: it never fails a run or changes a result.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import warnings
from array import array
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

OFF = "off"
"""``$CTXWINDOW_EMBEDDING_CACHE`` set to this keeps no vectors on disk."""
ENV = "CTXWINDOW_EMBEDDING_CACHE"
BATCH = 500  # digests a SELECT asks for (SQLite's bound on parameters is 32,766 or 999)


def cache_path() -> Path | None:
    """Where the eval keeps vectors by default: ``$CTXWINDOW_EMBEDDING_CACHE`` (None when it
    says ``off``), else ``$XDG_CACHE_HOME/ctxwindow/embeddings.sqlite3`` (``~/.cache``)."""
    given = os.environ.get(ENV, "").strip()
    if given.lower() == OFF:
        return None
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "ctxwindow" / "embeddings.sqlite3"


class VectorCache:
    """Vectors by model key, form and text, in one SQLite file shared by processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._pid = 0  # the process that opened _db (a forked worker opens its own)
        self._lock = threading.Lock()  # an archive embeds in its own thread
        self.broken: str | None = None  # why the cache is off for this run

    def get(self, model: str, form: str, texts: Sequence[str]) -> dict[str, list[float]]:
        """The vectors kept for those of ``texts`` that have one."""
        by_digest = {_digest(text): text for text in texts}
        found: dict[str, list[float]] = {}
        digests = list(by_digest)
        for at in range(0, len(digests), BATCH):
            part = digests[at : at + BATCH]
            marks = ",".join("?" * len(part))
            rows = self._run(
                f"SELECT digest, vector FROM vectors WHERE model = ? AND form = ?"
                f" AND digest IN ({marks})",
                (model, form, *part),
            )
            for digest, blob in rows:
                found[by_digest[digest]] = array("d", blob).tolist()
        return found

    def put(self, model: str, form: str, vectors: Iterable[tuple[str, Sequence[float]]]) -> None:
        """Keep ``(text, vector)`` pairs (a text kept already keeps its first vector)."""
        rows = [(model, form, _digest(t), array("d", v).tobytes()) for t, v in vectors]
        if rows:
            self._run("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?)", rows, many=True)

    def close(self) -> None:
        if self._db is not None and self._pid == os.getpid():
            self._db.close()
        self._db = None

    def _run(self, sql: str, params: Any, *, many: bool = False) -> list[Any]:
        if self.broken is not None:
            return []
        try:
            with self._lock:
                db = self._connection()
                if not many:
                    return db.execute(sql, params).fetchall()
                db.execute("BEGIN IMMEDIATE")  # one transaction (one sync) for the batch
                try:
                    db.executemany(sql, params)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
                return []
        except (sqlite3.Error, OSError) as exc:
            self.broken = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"the embedding cache {self.path} is off for this run ({self.broken});"
                f" vectors are computed as without it",
                RuntimeWarning,
                stacklevel=2,
            )
            return []

    def _connection(self) -> sqlite3.Connection:
        if self._db is None or self._pid != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path, timeout=60, isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # a cache: a crash may lose the last batch
            db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, form TEXT NOT NULL,"
                " digest BLOB NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, form, digest))"
                " WITHOUT ROWID"
            )
            self._db, self._pid = db, os.getpid()
        return self._db


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class CachedEmbedder:
    """``embedder`` with each text embedded once per form: in memory for the process, and in
    ``cache`` (a ``VectorCache``, or a function giving the one in use, None for none)
    across runs when the model has a ``cache_key``. It has the asymmetric pair
    (``embed_passages``, ``embed_queries``) exactly when the model has it."""

    def __init__(
        self, embedder: Any, cache: VectorCache | Callable[[], VectorCache | None] | None
    ) -> None:
        self.embedder = embedder
        self.dim: int = embedder.dim
        key = getattr(embedder, "cache_key", None)
        self.key: str | None = key if isinstance(key, str) else None
        self._cache = cache
        self._memory: dict[str, dict[str, list[float]]] = {}  # form -> text -> vector
        self.computed = 0  # texts the model embedded (not found in memory or on disk)
        self.embed = self._memoized("embed", embedder.embed)
        if hasattr(embedder, "embed_passages") and hasattr(embedder, "embed_queries"):
            self.embed_passages = self._memoized("passage", embedder.embed_passages)
            self.embed_queries = self._memoized("query", embedder.embed_queries)

    def clear(self) -> None:
        """Forget the vectors kept in memory (those on disk stay)."""
        for vectors in self._memory.values():
            vectors.clear()

    def _disk(self) -> VectorCache | None:
        if self.key is None:
            return None
        return self._cache() if callable(self._cache) else self._cache

    def _memoized(
        self, form: str, embed: Callable[[list[str]], list[list[float]]]
    ) -> Callable[[list[str]], list[list[float]]]:
        vectors = self._memory.setdefault(form, {})

        def memoized(texts: list[str]) -> list[list[float]]:
            new = list(dict.fromkeys(t for t in texts if t not in vectors))
            disk = self._disk() if new else None
            if disk is not None:
                assert self.key is not None
                kept = disk.get(self.key, form, new)  # (one of another length is not its)
                vectors.update((t, v) for t, v in kept.items() if len(v) == self.dim)
                new = [t for t in new if t not in vectors]
            if new:
                computed = list(zip(new, embed(new), strict=True))
                self.computed += len(new)
                vectors.update(computed)
                if disk is not None:
                    assert self.key is not None
                    disk.put(self.key, form, computed)
            return [vectors[text] for text in texts]

        return memoized


_in_use: VectorCache | None = None
_models: dict[type, CachedEmbedder] = {}


def use_cache(where: str | os.PathLike[str] | bool) -> VectorCache | None:
    """Set the file the eval's models keep vectors in: a path, True for ``cache_path()``,
    False for none. Set before the workers fork, it is theirs too."""
    global _in_use
    path = cache_path() if where is True else None if where is False else Path(where)
    if _in_use is not None and (path is None or _in_use.path != path):
        _in_use.close()
        _in_use = None
    if path is not None and _in_use is None:
        _in_use = VectorCache(path)
    return _in_use


def cache_in_use() -> VectorCache | None:
    return _in_use


def shared_cached(kind: type) -> CachedEmbedder:
    """The process's one model of class ``kind`` (``shared_embedder``: loading it is the slow
    part), each text embedded once, kept in the cache in use (``use_cache``): every budget
    and strategy of a run, and the runs after it, embed the same turns."""
    from ctxwindow.archive.embedders import shared_embedder

    if kind not in _models:
        _models[kind] = CachedEmbedder(shared_embedder(kind), cache_in_use)
    return _models[kind]
