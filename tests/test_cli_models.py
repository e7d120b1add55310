"""Model names on the command line: provider spellings and new OpenAI names count exactly,
an unknown name is one short line, and ``ctxwindow models`` lists what is known and how
each is counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxwindow.cli import app
from ctxwindow.errors import UnknownModelError
from ctxwindow.tokens.defaults import model_info
from ctxwindow.tokens.encodings import get_encoding
from ctxwindow.tokens.models import FAMILIES, MODELS
from ctxwindow.tokens.registry import ModelRegistry

runner = CliRunner()

MIXED = "Order A-1042 ships Tuesday. 订单已发货，预计周二送达。注文は火曜日に届きます 📦🚚"
MESSAGES = [
    {"role": "system", "content": "You track parcels. 你负责查询包裹。"},
    {"role": "user", "content": MIXED},
]


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def table(out: str) -> list[dict[str, str]]:
    """The tab-separated lines ``ctxwindow models`` prints when piped, by header."""
    header, *lines = out.splitlines()
    return [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]


# -- ctxwindow count with the names gateways and new models give --------------------------


@pytest.mark.parametrize(
    "model",
    ["openai/gpt-4o", "gpt-5.1", "openrouter/openai/gpt-4o", "gpt-5.2", "ft:gpt-4o:acme::x1"],
)
def test_count_text_is_o200k_base_for_these_names(model: str) -> None:
    """The count is tiktoken's o200k_base, token for token, on mixed scripts."""
    code, out, err = run("count", "--text", "--model", model, stdin=MIXED)
    assert (code, err) == (0, "")
    assert int(out) == len(get_encoding("o200k_base").encode(MIXED))


@pytest.mark.parametrize("model", ["openai/gpt-4o", "gpt-5.1", "azure/gpt-4o", "GPT-4o"])
def test_count_of_a_chat_is_the_same_as_gpt_4o(model: str) -> None:
    expected = run("count", "--model", "gpt-4o", stdin=json.dumps(MESSAGES))
    assert run("count", "--model", model, stdin=json.dumps(MESSAGES)) == expected
    code, out, _ = run("count", "--json", "--model", model, stdin=json.dumps(MESSAGES))
    assert code == 0 and json.loads(out)["exact"] is True


@pytest.mark.parametrize("model", ["acme-13b", "nobody/knows-7b", "模型-7b", "gpt-6", "x" * 400])
def test_an_unknown_name_is_one_short_line_naming_the_fix(model: str) -> None:
    code, out, err = run("count", "--model", model, stdin=json.dumps(MESSAGES))
    assert (code, out) == (2, "")
    assert err.startswith("ctxwindow: error: unknown model '") and err.count("\n") == 1
    assert len(err.rstrip("\n")) < 200
    assert "--model-config" in err and "--estimate" in err
    assert model[:20] in err


# -- ctxwindow models --------------------------------------------------------------------


def test_models_lists_every_builtin_entry_and_how_it_is_counted() -> None:
    code, out, err = run("models")
    assert (code, err) == (0, "")
    rows = {row["model"]: row for row in table(out)}
    assert set(MODELS) | set(FAMILIES) <= set(rows)
    assert rows["gpt-4o"]["counted by"] == "o200k_base (exact)"
    assert rows["gpt-4"]["counted by"] == "cl100k_base (exact)"
    assert rows["chatgpt-4o-latest"]["counted by"] == "o200k_base (exact), as gpt-4o"
    assert rows["gpt-5*"]["counted by"] == "o200k_base (exact), as gpt-5"
    assert rows["*claude-*"]["counted by"] == "estimate: Claude ×1.10"
    assert rows["*grok-4*"]["counted by"] == "estimate: Grok ×1.15"
    assert rows["*phi3*"]["counted by"] == "estimate: Phi-3 ×1.15"
    gpt_4o = rows["gpt-4o"]
    assert (gpt_4o["window"], gpt_4o["$ in / out per 1M"]) == ("128,000", "2.5 / 10")
    assert rows["anything else"]["counted by"].startswith("refused")
    assert rows["gpt-4o"]["source"] == "built-in"


def test_models_shows_configured_entries_first_with_their_file(tmp_path: Path) -> None:
    config = tmp_path / "models.toml"
    config.write_text(
        '[models."社内モデル-*"]\ncontext_window = 32768\nestimate = 1.3\n'
        '[models."my-gateway/*"]\ncontext_window = 8000\nencoding = "cl100k_base"\n',
        encoding="utf-8",
    )
    code, out, err = run("models", "--model-config", str(config), "--estimate")
    assert (code, err) == (0, "")
    rows = table(out)
    first = {r["model"]: r for r in rows[:2]}  # in the order they are tried: the longest glob
    assert list(first) == ["my-gateway/*", "社内モデル-*"]
    assert first["社内モデル-*"]["counted by"] == "estimate: custom ×1.30"
    assert first["my-gateway/*"]["counted by"] == "cl100k_base (exact)"
    assert {r["source"] for r in rows[:2]} == {str(config)}
    assert rows[-1]["model"] == "anything else"
    assert rows[-1]["counted by"] == "estimate: fallback ×1.20"


def test_models_with_names_shows_the_entry_each_resolves_to() -> None:
    names = ["openai/gpt-4o", "gpt-5.1", "gpt-5.2", "grok-4", "phi3", "claude-nonexistent-9"]
    code, out, err = run("models", "--json", *names)
    assert (code, err) == (0, "")
    rows: list[dict[str, Any]] = json.loads(out)
    entries = [row["entry"] for row in rows]
    assert entries == ["gpt-4o", "gpt-5.1", "gpt-5", "*grok-4*", "*phi3*", "*claude-*"]
    assert [row["exact"] for row in rows] == [True, True, True, False, False, False]
    assert rows[0]["encoding"] == "o200k_base" and rows[3]["estimate"]["family"] == "Grok"


def test_models_json_agrees_with_the_registry() -> None:
    """Every listed name resolves to the entry the listing says; a rule's prefix with a new
    suffix ("gpt-5" + "new") does too."""
    code, out, _ = run("models", "--json")
    assert code == 0
    registry = ModelRegistry()
    for row in json.loads(out):
        if row["kind"] == "model":
            info = registry.resolve(row["entry"])
            assert (info.name, info.context_window) == (row["entry"], row["context_window"])
        elif row["kind"] == "alias":
            assert registry.resolve(row["entry"]).name == row["as"]
        elif row["kind"] == "rule":
            assert registry.resolve(row["entry"].rstrip("*") + "new").name == row["as"]


def test_models_refuses_an_unknown_name_in_one_line() -> None:
    code, out, err = run("models", "nobody/knows-7b")
    assert (code, out) == (2, "")
    assert err.startswith("ctxwindow: error: unknown model 'nobody/knows-7b'")
    assert err.count("\n") == 1 and len(err) < 200


@pytest.mark.parametrize("name", ["", "/", "//", "ft:"])
def test_a_name_with_no_spelling_is_unknown_not_a_crash(name: str) -> None:
    """An empty or all-prefix name has no spelling to try: it is refused like any unknown
    name (the service answered 500 for an empty model before)."""
    with pytest.raises(UnknownModelError, match="unknown model") as refused:
        model_info(name)
    assert len(str(refused.value)) < 200
