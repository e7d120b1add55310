"""The pip command an error names for a missing extra matches how ctxwindow was installed."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from ctxwindow.extras import hint_for, install_hint


def test_from_an_index_the_distribution_name() -> None:
    assert hint_for("redis", None) == "pip install 'ctxwindow[redis]'"


def test_from_a_checkout_its_path_editable_or_not() -> None:
    assert hint_for("server", ("/src/ctxwindow", True)) == "pip install -e '/src/ctxwindow[server]'"
    assert hint_for("eval", ("/src/ctx window", False)) == "pip install '/src/ctx window[eval]'"
    quoted = hint_for("hf", ("/tmp/it's", True))  # a quote in the path stays one argument
    assert quoted == """pip install -e '/tmp/it'"'"'s[hf]'"""


def test_this_install_is_named_as_it_was_made() -> None:
    """The tests run on ``pip install -e .`` of this checkout (``make test``): the hint names
    the checkout, which works, where ``ctxwindow[redis]`` asks an index for it."""
    text = metadata.distribution("ctxwindow").read_text("direct_url.json")
    record = json.loads(text or "{}")
    if "dir_info" in record:
        root = Path(__file__).resolve().parent.parent
        editable = "-e " if record["dir_info"].get("editable") else ""
        assert install_hint("redis") == f"pip install {editable}'{root}[redis]'"
    else:
        assert install_hint("redis") == "pip install 'ctxwindow[redis]'"
