"""The core install: what it requires, and that it counts without the optional packages.

The encodings ship inside ctxwindow (``ctxwindow/tokens/data``); ``bpe-openai``
(74 MB, a Rust tokenizer) is the ``bpe`` extra, needed by ``BpeOpenAICounter`` alone.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tiktoken
from packaging.requirements import Requirement

from ctxwindow import configfile

# A child Python in which these packages cannot be imported, as on a core install.
HIDE = textwrap.dedent(
    """
    import sys
    for name in {hidden!r}:
        sys.modules[name] = None  # import and find_spec fail, as if not installed
    """
)


def _core_requirements() -> list[Requirement]:
    """ctxwindow's requirements that hold without any extra, on this Python."""
    found = [Requirement(line) for line in importlib.metadata.requires("ctxwindow") or []]
    return [r for r in found if r.marker is None or r.marker.evaluate({"extra": ""})]


def test_the_core_install_does_not_require_bpe_openai() -> None:
    names = {r.name for r in _core_requirements()}
    assert "bpe-openai" not in names, names
    assert {"tiktoken", "typer", "rich", "orjson"} <= names


def test_bpe_openai_is_the_bpe_extra() -> None:
    found = [Requirement(line) for line in importlib.metadata.requires("ctxwindow") or []]
    bpe = [r.name for r in found if r.marker is not None and r.marker.evaluate({"extra": "bpe"})]
    assert "bpe-openai" in bpe


def test_tomli_is_required_on_python_3_10_only() -> None:
    found = [Requirement(line) for line in importlib.metadata.requires("ctxwindow") or []]
    (tomli,) = [r for r in found if r.name == "tomli" and "extra" not in str(r.marker)]
    assert tomli.marker is not None
    assert tomli.marker.evaluate({"python_version": "3.10", "extra": ""})
    assert not tomli.marker.evaluate({"python_version": "3.11", "extra": ""})


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_counts_are_exact_without_bpe_openai(encoding: str) -> None:
    """The packaged files build the encodings in a process where bpe_openai cannot load."""
    text = "Order A-1042 ships 明天 (あした) 🎉 — naïve café"
    code = HIDE.format(hidden=["bpe_openai"]) + textwrap.dedent(
        f"""
        from ctxwindow.tokens import TiktokenCounter
        counter = TiktokenCounter({encoding!r})
        print(counter.encode({text!r}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    from ctxwindow.tokens.encodings import get_encoding  # built here, bpe_openai importable

    assert done.stdout.strip() == str(get_encoding(encoding).encode_ordinary(text))
    assert isinstance(get_encoding(encoding), tiktoken.Encoding)


def test_bpe_counter_without_its_extra_names_the_install() -> None:
    code = HIDE.format(hidden=["bpe_openai"]) + textwrap.dedent(
        """
        from ctxwindow.tokens import BpeOpenAICounter
        try:
            BpeOpenAICounter("o200k_base")
        except ImportError as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "BpeOpenAICounter needs bpe_openai: pip install" in done.stdout
    assert "[bpe]" in done.stdout


def test_toml_config_on_python_3_10_reads_with_tomli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.10 has no tomllib: the reader is tomli, with the same errors."""
    import tomli

    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    assert configfile._toml_reader() is tomli
    path = tmp_path / "ctxwindow.toml"
    path.write_text('[models]\n"本地-模型" = "o200k_base"  # 🎉\n', "utf-8")
    assert configfile._toml(path, path.read_text("utf-8"), ValueError) == {
        "models": {"本地-模型": "o200k_base"}
    }
    with pytest.raises(ValueError, match="not valid TOML"):
        configfile._toml(path, "[models\n", ValueError)
