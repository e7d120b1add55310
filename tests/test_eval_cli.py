"""``ctxwindow eval`` end to end: table, results.json, report.html, charts, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxwindow.cli import app

from .support.eval_data import broken, conversation
from .support.offline import NO_NETWORK

runner = CliRunner()


def write(path: Path, *conversations: dict[str, object]) -> str:
    path.write_text(json.dumps({"conversations": list(conversations)}), encoding="utf-8")
    return str(path)


def test_eval_writes_results_report_and_charts(tmp_path: Path) -> None:
    data = write(tmp_path / "d.json", conversation())
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["eval", "--dataset", data, "--budgets", "150,100000", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "token_window" in result.stdout and "evidence recall" in result.stdout
    assert f"Report: {out / 'report.html'}" in result.stdout.replace("\n", "")
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["dataset"] == data
    assert set(results["results"]) == {"message_window", "token_window", "hybrid", "full"}
    assert results["results"]["full"]["unbounded"]["evidence_recall"] == 1.0
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in html
    assert (out / "recall_vs_budget.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "recall_vs_tokens.png").exists()


def test_invalid_dataset_stops_before_measuring(tmp_path: Path) -> None:
    bad = broken(questions__0__evidence=["m99"])
    bad["id"] = "c2"
    data = write(tmp_path / "bad.json", conversation(), bad)
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "--dataset", data, "--out", str(out)])
    assert result.exit_code == 2
    assert "evidence ['m99'] not among" in result.stderr
    assert not out.exists()


def test_skip_invalid_measures_the_valid_rest(tmp_path: Path) -> None:
    bad = broken(questions__0__evidence=["m99"])
    bad["id"] = "c2"
    data = write(tmp_path / "mixed.json", conversation(), bad)
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["eval", "--dataset", data, "--skip-invalid", "--budgets", "500", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "skipped" in result.stderr and "m99" in result.stderr
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["n_questions"] == 7


def test_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    data = write(tmp_path / "d.json", conversation())
    for args, fragment in [
        (["--strategies", "nope"], "unknown strategy 'nope'"),
        (["--budgets", "10,x"], "'x' is not a positive integer"),
        (["--model", "gpt-99"], "unknown model 'gpt-99'"),
        (["--llm-model", "m"], "needs both --llm-base-url and --llm-model"),
    ]:
        result = runner.invoke(app, ["eval", "--dataset", data, "--out", str(tmp_path), *args])
        assert result.exit_code == 2, args
        assert result.stderr.startswith("ctxwindow: error: ") and fragment in result.stderr


def outputs(tmp_path: Path) -> dict[str, Path]:
    """Places --out cannot be: each made in ``tmp_path``."""
    (tmp_path / "报告.html").write_text("an old report", encoding="utf-8")
    (tmp_path / "taken" / "report.html").mkdir(parents=True)
    return {
        "a file": tmp_path / "报告.html",
        "a file name": tmp_path / "new-report.html",
        "in a file": tmp_path / "报告.html" / "out",
        "a folder holding a folder report.html": tmp_path / "taken",
    }


@pytest.mark.parametrize(
    ("place", "says"),
    [
        (
            "a file",
            "is a file: --out names the folder that gets results.json, report.html and the charts",
        ),
        ("a file name", "looks like a file name: --out names the folder that gets results.json"),
        ("in a file", "报告.html is a file, so no folder can be made in it"),
        ("a folder holding a folder report.html", "report.html is a folder, where a file is"),
    ],
)
def test_out_is_checked_before_any_work(tmp_path: Path, place: str, says: str) -> None:
    """--out names a folder that can be written: anything else is one line, exit status 2,
    before a dataset is loaded or a step measured (no progress on stderr)."""
    data = write(tmp_path / "d.json", conversation())
    out = outputs(tmp_path)[place]
    result = runner.invoke(app, ["eval", "--dataset", data, "--out", str(out)])
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ctxwindow: error: --out {out}"), lines
    assert says in lines[0]
    assert (tmp_path / "报告.html").read_text(encoding="utf-8") == "an old report"


@pytest.mark.skipif(
    not os.path.isdir("/sys/kernel"), reason="needs Linux's /sys, where no one writes"
)
def test_out_where_no_folder_can_be_made(tmp_path: Path) -> None:
    data = write(tmp_path / "d.json", conversation())
    result = runner.invoke(app, ["eval", "--dataset", data, "--out", "/sys/ctxwindow-report"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        "ctxwindow: error: --out /sys/ctxwindow-report: cannot make the folder"
        " /sys/ctxwindow-report: "
    )
    assert result.stderr.count("\n") == 1


OFFLINE = (
    NO_NETWORK
    + """
import sys
from ctxwindow.cli import main
sys.argv = ["ctxwindow", "eval", "--dataset", sys.argv[1], "--out", sys.argv[2]]
main()
"""
)


def test_eval_needs_no_network(tmp_path: Path) -> None:
    data = write(tmp_path / "d.json", conversation())
    env = {"PATH": "/usr/bin:/bin", "MPLCONFIGDIR": str(tmp_path / "mpl")}
    result = subprocess.run(
        [sys.executable, "-c", OFFLINE, data, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "report.html").exists()
