"""Where evicted entries go, and come back from (docs/archive.md).

Lexical search always (BM25 over the archive's own per-session index, at a
bounded cost per search; English stemming, Chinese and Japanese by bigrams);
dense search when an ``Embedder`` is given (``default_embedder()``: the packaged
``E5SmallEmbedder`` when the ``dense`` extra is installed, else None; ``MiniLMEmbedder``
with the ``embeddings`` extra); the two fused by score (``fuse_scores``).

>>> from ctxwindow import Entry
>>> with SQLiteArchive() as archive:
...     _ = archive.index("s1", [Entry({"role": "user", "content": "退货政策是30天"}, 9, 1)])
...     archive.search("s1", "退货政策?")[0].lexical_rank
1
"""

from ctxwindow.archive.base import Archive, Hit, fuse_scores
from ctxwindow.archive.embedders import (
    E5SmallEmbedder,
    Embedder,
    MiniLMEmbedder,
    default_embedder,
    shared_embedder,
)
from ctxwindow.archive.fusion import reciprocal_rank_fusion
from ctxwindow.archive.postgres import PostgresArchive
from ctxwindow.archive.sqlite import SQLiteArchive

__all__ = [
    "Archive",
    "E5SmallEmbedder",
    "Embedder",
    "Hit",
    "MiniLMEmbedder",
    "PostgresArchive",
    "SQLiteArchive",
    "default_embedder",
    "fuse_scores",
    "reciprocal_rank_fusion",
    "shared_embedder",
]
