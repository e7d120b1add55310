"""``ctxwindow count``: bare integers, a JSON breakdown, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxwindow import count_tokens
from ctxwindow.cli import app

from .support.guide import GUIDE_MESSAGES, GUIDE_TOOL_MESSAGES, GUIDE_TOOLS

runner = CliRunner()


def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["count", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_prints_the_bare_integer_from_stdin() -> None:
    code, out, err = invoke("--model", "gpt-4", stdin=json.dumps(GUIDE_MESSAGES))
    assert (code, out, err) == (0, "129\n", "")


def test_reads_a_file_and_tools(tmp_path: Path) -> None:
    messages = tmp_path / "messages.json"
    tools = tmp_path / "tools.json"
    messages.write_text(json.dumps(GUIDE_TOOL_MESSAGES), encoding="utf-8")
    tools.write_text(json.dumps(GUIDE_TOOLS), encoding="utf-8")
    assert invoke(str(messages), "--tools", str(tools)) == (0, "101\n", "")


def test_accepts_a_request_body_object() -> None:
    body = {"model": "ignored", "messages": GUIDE_TOOL_MESSAGES, "tools": GUIDE_TOOLS}
    assert invoke("--model", "gpt-4o-mini", stdin=json.dumps(body))[1] == "101\n"


def test_text_mode_counts_plain_text_without_framing() -> None:
    code, out, _ = invoke("--text", stdin="你好世界 hello")
    assert code == 0
    assert int(out) == count_tokens([{"role": "user", "content": "你好世界 hello"}]) - 3 - 1 - 3


def test_json_breakdown_adds_up() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "日本語で答えて 🙏", "name": "kenji"},
    ]
    code, out, _ = invoke("--json", stdin=json.dumps(messages, ensure_ascii=False))
    breakdown = json.loads(out)
    assert code == 0
    assert breakdown["total"] == count_tokens(messages)
    assert breakdown["exact"] is True
    parts = sum(m["tokens"] for m in breakdown["messages"]) + breakdown["reply_priming"]
    assert parts == breakdown["total"]
    assert [m["role"] for m in breakdown["messages"]] == ["system", "user"]


@pytest.mark.parametrize(
    ("stdin", "args", "fragment"),
    [
        ("not json", (), "input is not valid JSON"),
        ('{"a": 1}', (), "must be a JSON array of chat messages"),
        ('[{"role": "wizard", "content": "x"}]', (), "message 0: unknown role 'wizard'"),
        ('[{"role": "user"}]', (), "message 0: user message has no 'content'"),
        ("[]", ("--model", "gpt-99"), "unknown model 'gpt-99'"),
        ('{"messages": [], "tools": 3}', (), "tools must be a JSON array"),
        ("[]", ("/no/such/file.json",), "cannot read /no/such/file.json"),
    ],
)
def test_bad_input_is_one_line_on_stderr(stdin: str, args: tuple[str, ...], fragment: str) -> None:
    code, out, err = invoke(*args, stdin=stdin)
    assert code == 2
    assert out == ""
    assert err.startswith("ctxwindow: error: ") and fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_estimate_flag_allows_unknown_models_with_a_warning() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ctxwindow.cli", "count", "--estimate", "--model", "claude-3"],
        input='[{"role": "user", "content": "hello"}]',
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert int(result.stdout) > 0
    assert result.stderr.startswith("ctxwindow: warning: model 'claude-3'")


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "ctxwindow"
    result = subprocess.run(
        [str(script), "count", "--model", "gpt-4o"],
        input=json.dumps(GUIDE_MESSAGES),
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "124\n")
