"""The dense index of the baselines, and each text embedded once per process.

``Embeddings`` holds the unit vectors of one embedder's texts, each distinct
text embedded once, in a cache shared by every budget and dense strategy
(``embeddings_of``); texts noted as coming together (``expect``: one
conversation's turns and questions) are embedded in one call when the first
of them is needed. A model with the asymmetric pair (``embed_passages``,
``embed_queries``) embeds searched texts and questions each in its own form.
``Dense`` is a baseline's rows of vectors, scored by cosine.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ctxwindow.archive.embedders import Embedder

    Vector = npt.NDArray[np.float64]


class Embeddings:
    """Unit vectors of texts, each distinct text embedded once, for one embedder.

    A model with the asymmetric pair (``embed_passages`` and ``embed_queries``,
    as E5's prefixes) embeds the searched texts as passages and the questions
    as queries, as the archive does (the form it was trained to retrieve by);
    any other embeds both with ``embed``. ``expect`` notes texts that come
    together (no model is loaded): the first of them asked for embeds them all
    in one call per form.
    """

    def __init__(self, make: Callable[[], Embedder]) -> None:
        self._make = make
        self._embedder: Embedder | None = None
        self._vectors: dict[tuple[bool, str], Vector] = {}
        self._batches: dict[tuple[bool, str], tuple[tuple[bool, str], ...]] = {}
        self._noted: set[Hashable] = set()

    def expect(
        self, key: Hashable, passages: Callable[[], Iterable[str]], queries: Iterable[str] = ()
    ) -> None:
        """Note the texts searched (``passages``) and the ``queries`` that come together under
        ``key`` (noted once a key)."""
        if key in self._noted:
            return
        self._noted.add(key)
        items = [*((False, t) for t in passages()), *((True, t) for t in queries)]
        batch = tuple(dict.fromkeys(item for item in items if item not in self._vectors))
        for item in batch:
            self._batches.setdefault(item, batch)

    def vector(self, text: str, *, query: bool = False) -> Vector:
        """The unit vector of ``text``, searched (a passage) or searched for (``query``)."""
        embedder = self._loaded()
        asymmetric = _asymmetric(embedder)
        item = (query and asymmetric, text)  # a symmetric model has one form for both
        found = self._vectors.get(item)
        if found is not None:
            return found
        batch = self._batches.get((query, text), ())
        wanted = dict.fromkeys([item, *((q and asymmetric, t) for q, t in batch)])
        for form in (False, True):
            texts = [t for q, t in wanted if q == form and (q, t) not in self._vectors]
            if texts:
                for t, vector in zip(texts, self._embed(embedder, texts, form), strict=True):
                    self._vectors[(form, t)] = vector
        for q, t in batch:
            self._batches.pop((q, t), None)
        return self._vectors[item]

    def _loaded(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._make()
            _one_thread_in_a_worker()
        return self._embedder

    @staticmethod
    def _embed(embedder: Embedder, texts: list[str], query: bool) -> list[Vector]:
        import numpy as np

        if _asymmetric(embedder):
            found = getattr(embedder, "embed_queries" if query else "embed_passages")(texts)
        else:
            found = embedder.embed(texts)
        vectors = np.asarray(found, dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return list(np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0))


def _asymmetric(embedder: Embedder) -> bool:
    """Whether the model embeds what is searched and what searches it in forms of their own."""
    return hasattr(embedder, "embed_passages") and hasattr(embedder, "embed_queries")


def _one_thread_in_a_worker() -> None:
    """In a worker of the eval's process pool (one per CPU), PyTorch on one thread.

    More threads than cores wait for each other (OpenMP spins): on this 2-core
    machine under load, a sentence took 2 s on two threads, 0.15 s on one.
    """
    import multiprocessing
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and multiprocessing.parent_process() is not None:
        torch.set_num_threads(1)


def default_embedder() -> Embedder:
    """ctxwindow's default embedder (``default_embedder()`` of ``ctxwindow.archive.embedders``)
    when its extra is installed, else all-MiniLM-L6-v2: the process's one model, each text
    embedded once, and kept for later runs (``vector_cache.shared_cached``)."""
    from ctxwindow.archive import embedders
    from ctxwindow.eval.vector_cache import shared_cached

    found = embedders.default_embedder()
    return shared_cached(type(found) if found is not None else embedders.MiniLMEmbedder)


_DEFAULT = Embeddings(default_embedder)
_injected: dict[int, tuple[Embedder, Embeddings]] = {}


def embeddings_of(embedder: Embedder | None) -> Embeddings:
    """The process's cache for ``embedder`` (None: the default one, loaded when first needed)."""
    if embedder is None:
        return _DEFAULT
    if id(embedder) not in _injected:  # the embedder is kept, so its id stays its own
        _injected[id(embedder)] = (embedder, Embeddings(lambda: embedder))
    return _injected[id(embedder)][1]


@dataclass
class Dense:
    """The unit vectors of the ingested messages, one row each."""

    rows: Any = None  # an (n, dim) array, grown by doubling
    n: int = 0

    def add(self, vector: Vector) -> None:
        import numpy as np

        if self.rows is None:
            self.rows = np.zeros((16, len(vector)))
        elif self.n == len(self.rows):
            self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
        self.rows[self.n] = vector
        self.n += 1

    def scores(self, query: Vector) -> Vector:
        import numpy as np

        if self.rows is None:
            return np.zeros(0)
        scores: Vector = self.rows[: self.n] @ query
        return scores
