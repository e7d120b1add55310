"""Where evicted entries go, and come back from (docs/archive.md).

Lexical search always (BM25 over the archive's own per-session index, at a
bounded cost per search; English stemming, Chinese and Japanese by bigrams);
dense search when an ``Embedder`` is given; the two fused by score (``fuse_scores``).

>>> from ctxwindow import Entry
>>> with SQLiteArchive() as archive:
...     _ = archive.index("s1", [Entry({"role": "user", "content": "退货政策是30天"}, 9, 1)])
...     archive.search("s1", "退货政策?")[0].lexical_rank
1
"""

from ctxwindow.archive.base import Archive, Hit, fuse_scores
from ctxwindow.archive.embedders import Embedder, MiniLMEmbedder
from ctxwindow.archive.fusion import reciprocal_rank_fusion
from ctxwindow.archive.postgres import PostgresArchive
from ctxwindow.archive.sqlite import SQLiteArchive

__all__ = [
    "Archive",
    "Embedder",
    "Hit",
    "MiniLMEmbedder",
    "PostgresArchive",
    "SQLiteArchive",
    "fuse_scores",
    "reciprocal_rank_fusion",
]
