"""The evaluation report: PNG charts, one self-contained HTML page, results.json."""

from __future__ import annotations

import base64
import copy
import html
import json
import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwindow.eval.report import render_html, write_charts, write_report

CUSTOM = "<b>x</b> & 'quotes'"
UNICODE = "窓口 window 🪟"
CHART_NAMES = ["recall_vs_budget.png", "recall_vs_tokens.png", "recall_by_category.png"]


def _run(recall: float, tokens: float, **extra: Any) -> dict[str, Any]:
    metrics = {
        "evidence_recall": recall,
        "turn_recall": min(1.0, recall + 0.11),
        "mean_tokens": tokens,
        "mean_cost_usd": tokens * 2.5 / 1e6,
        "total_cost_usd": tokens * 2.5 / 1e6 * 44,
        "build_ms_p50": 0.5,
        "build_ms_p99": 1.2,
        "n": 44,
        "over_budget_rate": 0.0,
        "by_category": {
            "single-hop": {"evidence_recall": recall, "turn_recall": recall, "n": 20},
            "multi-hop": {"evidence_recall": recall / 2, "turn_recall": recall, "n": 24},
        },
        "answer_score": None,
    }
    return {**metrics, **extra}


def make_results() -> dict[str, Any]:
    """Built-in strategies, an unbounded one, and custom names a user could register."""
    return {
        "model": "gpt-4o",
        "dataset": "builtin:<all> & more",
        "input_price_per_mtok": 2.5,
        "budgets": [1024, 2048, 4096],
        "strategies": ["message_window", "token_window", "full", CUSTOM],
        "n_conversations": 8,
        "n_questions": 44,
        "results": {
            "token_window": {
                "1024": _run(0.41, 1001.2),
                "2048": _run(0.55, 1990.0),
                "4096": _run(0.72, 4000.5, answer_score=0.8125),
            },
            "message_window": {
                "1024": _run(0.33, 900.0, messages=12, over_budget_rate=0.05),
                "2048": _run(0.47, 1700.0, messages=24),
                "4096": _run(0.61, 3500.0, messages=48),
            },
            "full": {"unbounded": _run(0.98, 23412.0)},
            CUSTOM: {
                "1024": {"evidence_recall": 0.2, "turn_recall": 0.3, "mean_tokens": 700, "n": 44},
                "4096": {"evidence_recall": 0.5, "turn_recall": 0.6, "mean_tokens": 3000, "n": 44},
            },
            # Not declared in "strategies": still reported, after the declared ones.
            UNICODE: {"2048": _run(0.5, 2000.0)},
        },
    }


@pytest.fixture
def results() -> dict[str, Any]:
    return make_results()


@pytest.fixture
def report(tmp_path: Path, results: dict[str, Any]) -> Path:
    return write_report(results, tmp_path / "out")


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the PNG signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_writes_json_charts_and_html(report: Path) -> None:
    names = sorted(path.name for path in report.parent.iterdir())
    assert names == sorted(["report.html", "results.json", *CHART_NAMES])
    assert report.name == "report.html"


def test_charts_are_png_of_a_readable_size(report: Path) -> None:
    for name in CHART_NAMES:
        width, height = png_size((report.parent / name).read_bytes())
        assert 800 <= width <= 1400, name
        assert 500 <= height <= 900, name


def test_results_json_round_trips(report: Path, results: dict[str, Any]) -> None:
    text = (report.parent / "results.json").read_text(encoding="utf-8")
    assert json.loads(text) == results
    assert UNICODE in text  # ensure_ascii=False keeps the names readable


def test_html_loads_nothing_from_anywhere(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    references = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", page, re.IGNORECASE)
    assert references, "the charts should be referenced"
    assert all(ref.startswith("data:image/png;base64,") for ref in references)
    assert "http://" not in page
    assert "https://" not in page
    assert "url(" not in page
    assert "@import" not in page


def test_embeds_every_chart_as_a_data_uri(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    for name in CHART_NAMES:
        data = base64.b64encode((report.parent / name).read_bytes()).decode("ascii")
        assert f'src="data:image/png;base64,{data}"' in page


def test_escapes_every_user_supplied_name(report: Path, results: dict[str, Any]) -> None:
    page = report.read_text(encoding="utf-8")
    for name in results["results"]:
        assert html.escape(name) in page
    assert "<b>x</b>" not in page
    assert html.escape("builtin:<all> & more") in page


def test_formats_numbers_for_people(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    assert ">41.0%<" in page  # evidence recall
    assert ">52.0%<" in page  # turn recall
    assert ">1,001<" in page  # mean tokens
    assert ">$0.00250<" in page  # cost per question: three significant digits
    assert ">5.0%<" in page  # over budget
    assert ">0.81<" in page  # answer score
    assert ">23,412<" in page
    assert "$2.50 per million tokens" in page


def test_highlights_the_best_evidence_recall_per_budget(results: dict[str, Any]) -> None:
    page = render_html(results, {})
    best = re.findall(r"<td class='num best'>([^<]*)</td>", page)
    # 1024: token_window 41% beats 33% and 20%; 2048: 55%; 4096: 72%; unbounded: alone.
    assert best == ["41.0%", "55.0%", "72.0%"]


def test_optional_columns_appear_only_when_some_run_has_them(results: dict[str, Any]) -> None:
    assert "N messages" in render_html(results, {})
    assert "Answer score" in render_html(results, {})
    for strategy in results["results"].values():
        for metrics in strategy.values():
            metrics.pop("messages", None)
            metrics["answer_score"] = None
    page = render_html(results, {})
    assert "N messages" not in page
    assert "Answer score" not in page


def test_per_category_table(results: dict[str, Any]) -> None:
    page = render_html(results, {})
    assert "Evidence recall by question category" in page
    assert "single-hop<br><small>n=20</small>" in page
    assert ">20.5%<" in page  # multi-hop of token_window at 1024: 0.41 / 2


def test_without_categories_there_is_no_category_table_or_chart(
    tmp_path: Path, results: dict[str, Any]
) -> None:
    for strategy in results["results"].values():
        for metrics in strategy.values():
            metrics.pop("by_category", None)
    assert "by question category" not in render_html(results, {})
    paths = write_charts(results, tmp_path)
    assert [path.name for path in paths] == CHART_NAMES[:2]


def test_writing_twice_gives_identical_files(tmp_path: Path, results: dict[str, Any]) -> None:
    first = write_report(results, tmp_path / "first")
    second = write_report(copy.deepcopy(results), tmp_path / "second")
    assert first.read_text(encoding="utf-8") == second.read_text(encoding="utf-8")
    for name in CHART_NAMES:
        assert (first.parent / name).read_bytes() == (second.parent / name).read_bytes()


def test_chart_text_is_never_read_as_math(tmp_path: Path, results: dict[str, Any]) -> None:
    """A ``$`` pair in a user's name would be mathtext; an unknown command would raise."""
    results["dataset"] = r"costs $\notacommand{x}$"
    results["results"][r"$\alsonot$"] = results["results"].pop(CUSTOM)
    assert len(write_charts(results, tmp_path)) == 3


def test_unbounded_only_results_still_draw(tmp_path: Path) -> None:
    results = {"model": "gpt-4o", "results": {"full": {"unbounded": _run(0.9, 5000.0)}}}
    paths = write_charts(results, tmp_path)
    assert [path.name for path in paths] == ["recall_vs_tokens.png", "recall_by_category.png"]


def test_missing_matplotlib_names_the_extra(
    tmp_path: Path, results: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'ctxwindow[eval]'")):
        write_charts(results, tmp_path)


def test_render_html_needs_no_matplotlib(
    results: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    page = render_html(results, {"custom chart.png": b"\x89PNG fake"})
    assert page.startswith("<!DOCTYPE html>")
    assert "<figcaption>custom chart</figcaption>" in page
