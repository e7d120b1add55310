"""The evaluation report: charts (PNG files, inline SVG), one self-contained HTML page,
results.json; charts free of colliding text, and a warning when a PNG lacks a font."""

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

from ctxwindow.eval.report import (
    Chart,
    MissingFontWarning,
    draw_charts,
    figures,
    render_html,
    write_charts,
    write_report,
)
from ctxwindow.eval.report.charts import CHARTS
from ctxwindow.eval.report.figures import chart_style, style_context
from ctxwindow.eval.report.glyphs import script_of
from ctxwindow.eval.report.labels import drawn_texts, laid_out, overlapping_texts
from ctxwindow.eval.report.runs import read_runs, strategy_colors
from ctxwindow.extras import install_hint

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


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One report of ``make_results()`` for the tests that only read it."""
    return write_report(make_results(), tmp_path_factory.mktemp("report") / "out")


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
        # The category chart grows with its rows of panels; the others are 8 × 5 inches.
        assert 450 <= height <= (1600 if name == "recall_by_category.png" else 900), name


def test_results_json_round_trips(report: Path, results: dict[str, Any]) -> None:
    text = (report.parent / "results.json").read_text(encoding="utf-8")
    assert json.loads(text) == results
    assert UNICODE in text  # ensure_ascii=False keeps the names readable


def test_html_loads_nothing_from_anywhere(report: Path) -> None:
    """References are the PNG downloads (data URIs) or fragments of this very page."""
    page = report.read_text(encoding="utf-8")
    ids = set(re.findall(r"""\bid=["']?([^"'\s>]+)""", page))
    references = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", page, re.IGNORECASE)
    assert references, "the charts should be referenced"
    for ref in references:
        assert ref.startswith("data:image/png;base64,") or ref[1:] in ids, ref
    assert set(re.findall(r"url\(#([^)]+)\)", page)) <= ids
    assert re.findall(r"url\(([^#])", page) == []
    assert "http://" not in page
    assert "https://" not in page
    assert "@import" not in page
    assert "<script src" not in page and "<link" not in page


def test_ids_are_unique_across_the_inlined_charts(report: Path) -> None:
    ids = re.findall(r"""\bid=["']?([^"'\s>]+)""", report.read_text(encoding="utf-8"))
    assert len(ids) == len(set(ids))


def test_charts_are_inline_svg_with_real_text_and_a_png_download(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) == len(CHART_NAMES)
    for svg in svgs:
        assert 'role="img"' in svg and "aria-label=" in svg
        assert len(re.findall(r"<text\b", svg)) > 5
        assert "font-family" not in svg  # the page's fonts, with CJK fallbacks
        assert "<?xml" not in svg and "<metadata" not in svg
    assert "窓口 window" in page.split("<svg", 1)[1]  # a name as text, not as glyph outlines
    for name in CHART_NAMES:
        data = base64.b64encode((report.parent / name).read_bytes()).decode("ascii")
        assert f'href="data:image/png;base64,{data}" download="{name}"' in page


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


def test_kept_whole_and_recent_recall_columns(results: dict[str, Any]) -> None:
    """Shown when the runs have them (results.json of older versions lack them)."""

    def head(page: str) -> list[str]:
        return re.findall(r"<th class=num>([^<]*)</th>", page)[:4]

    assert head(render_html(results, {}))[:2] == ["Evidence recall", "Turn recall"]
    results["results"]["token_window"]["1024"].update(
        evidence_recall_whole=0.375, recent_recall=0.9625
    )
    page = render_html(results, {})
    assert head(page) == ["Evidence recall", "Kept whole", "Turn recall", "Recent recall"]
    assert ">37.5%<" in page and ">96.2%<" in page  # 0.9625 rounds half to even
    assert "<b>kept whole</b>" in page and "last 4 messages" in page


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
    with pytest.raises(ImportError, match=re.escape(install_hint("eval"))):
        write_charts(results, tmp_path)


def test_render_html_needs_no_matplotlib(
    results: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    page = render_html(results, [Chart("custom chart.png", b"\x89PNG fake")])
    assert page.startswith("<!DOCTYPE html>")
    assert "<figcaption>custom chart</figcaption>" in page
    assert 'src="data:image/png;base64,' in page  # a chart without SVG shows its PNG


# -- the category chart --------------------------------------------------------------------


def test_the_category_chart_shows_every_budget(tmp_path: Path, results: dict[str, Any]) -> None:
    [chart] = [c for c in draw_charts(results, tmp_path) if c.name == "recall_by_category.png"]
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", chart.svg)
    assert {"1k", "2k", "4k", "∞", "single-hop (n=20)", "multi-hop (n=24)"} <= set(texts)
    # Every run's recall in every category, the smallest budget included.
    for strategy in ("token_window", "message_window"):
        for metrics in results["results"][strategy].values():
            for category in metrics["by_category"].values():
                assert f"{category['evidence_recall'] * 100:.0f}" in texts
    assert "98" in texts and "49" in texts  # full, unbounded: 0.98 and 0.49


# -- text that never collides --------------------------------------------------------------


def figures_of(results: dict[str, Any]) -> dict[str, Any]:
    """Each chart's matplotlib figure, drawn as the report draws it."""
    runs, colors = read_runs(results), strategy_colors(results)
    drawn = {}
    with style_context(chart_style()):
        for name, draw in CHARTS.items():
            figure = draw(results, runs, colors)
            if figure is not None:
                drawn[name] = figure
    return drawn


def crowded_results() -> dict[str, Any]:
    """What makes text collide: close budgets (1,000 beside 1,024), points at 0 % and at
    100 %, seven categories with long and CJK names, many strategies."""
    categories = ["single-session-preference", "多跳推理问题", "temporal", "open-domain",
                  "knowledge-update", "单跳", "a very long category name, indeed"]  # fmt: skip
    results = make_results()
    per_category = {c: {"evidence_recall": i / 7, "n": 3 + i} for i, c in enumerate(categories)}
    budgets = [1000, 1024, 2048, 4096, 8192, 16384, 32768]
    for k, name in enumerate(["滑动窗口", "hybrid", "hybrid_norecall", "bm25", "hybrid_minilm"]):
        results["results"][name] = {
            str(b): _run(min(1.0, k * 0.1 + i * 0.15), b * 0.9, by_category=per_category)
            for i, b in enumerate(budgets)
        }
    results["results"]["token_window"]["1024"]["evidence_recall"] = 0.0
    return results


# Drawn here without the report's reading of them: the emoji of a name has no glyph.
IGNORE_GLYPHS = pytest.mark.filterwarnings("ignore:Glyph .* missing from font")


@IGNORE_GLYPHS
@pytest.mark.parametrize("shape", ["simple", "crowded"])
def test_no_two_texts_of_a_chart_overlap(shape: str) -> None:
    results = make_results() if shape == "simple" else crowded_results()
    for name, figure in figures_of(results).items():
        assert overlapping_texts(figure) == [], name


@IGNORE_GLYPHS
def test_budget_labels_stay_inside_the_plot_clear_of_the_axis_ticks() -> None:
    """A point at 0 % recall once had its label drawn over the tick labels below it."""
    results = crowded_results()
    figure = figures_of(results)["recall_vs_tokens.png"]
    renderer = laid_out(figure)
    [axes] = figure.axes
    inside = axes.get_window_extent(renderer)
    labels = [t for t in drawn_texts(figure) if t in axes.texts]
    assert len(labels) >= 20  # most budget points keep their label
    for label in labels:
        box = label.get_window_extent(renderer)
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, label.get_text()
        assert inside.y0 <= box.y0 and box.y1 <= inside.y1, label.get_text()


def test_overlap_check_sees_colliding_text() -> None:
    """The check the charts are held to does catch two texts on one spot."""
    from matplotlib.figure import Figure

    figure = Figure()
    axes = figure.subplots()
    axes.text(0.5, 0.5, "one label")
    axes.text(0.52, 0.5, "another")
    assert ("one label", "another") in overlapping_texts(figure)


# -- fonts ---------------------------------------------------------------------------------


def test_a_png_without_a_cjk_font_warns_and_the_report_says_so(
    tmp_path: Path, results: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(figures, "FALLBACK_FONTS", ())  # as on a machine without CJK fonts
    with pytest.warns(MissingFontWarning, match=r"draw CJK text as boxes.*fonts-noto-cjk"):
        report = write_report(results, tmp_path)
    page = report.read_text(encoding="utf-8")
    assert "<p class=note role=note>The PNG charts draw CJK text as boxes" in page


def test_with_a_cjk_font_there_is_no_warning(tmp_path: Path, results: dict[str, Any]) -> None:
    """The machine the tests run on has Noto Sans CJK (tools/install-browser installs it);
    the emoji of a name is no script and draws no warning."""
    page = write_report(results, tmp_path).read_text(encoding="utf-8")  # warnings are errors
    assert "class=note" not in page


def test_scripts_are_named_for_the_warning() -> None:
    assert [script_of(c) for c in "窗かカ한"] == ["CJK"] * 4
    assert [script_of(c) for c in "بกअ"] == ["Arabic", "Thai", "Devanagari"]
    assert [script_of(c) for c in "🪟7%"] == [None, None, None]


def test_the_page_says_what_each_strategy_keeps(results: dict[str, Any]) -> None:
    """Each strategy's description, as the run recorded it, escaped, in the results' order."""
    results["strategy_descriptions"] = {
        "token_window": "TokenWindow: the newest whole messages that fit the token budget.",
        CUSTOM: "Mine <i>keeps</i> 中文 and 🎉.",
    }
    page = render_html(results)
    section = page.split("<h2 id=strategies>", 1)[1].split("<h2", 1)[0]
    assert "<a href='#strategies'>Strategies</a>" in page
    assert "the newest whole messages that fit the token budget." in section
    assert html.escape("Mine <i>keeps</i> 中文 and 🎉.") in section
    assert section.index("token_window") < section.index(html.escape(CUSTOM))
    assert "message_window" not in section  # not described: no empty entry


def test_a_run_records_each_strategy_description() -> None:
    """``ctxwindow eval``'s results name what each strategy is, from its class."""
    from ctxwindow.eval import load_dataset
    from ctxwindow.eval.runner import run_eval
    from ctxwindow.eval.strategies import get_strategy

    dataset, _ = load_dataset("builtin:orders?turns=12&seed=1")
    results = run_eval(dataset, strategies=["token_window", "full"], budgets=[512])
    described = results["strategy_descriptions"]
    assert set(described) == {"token_window", "full"}
    assert described["token_window"].startswith("TokenWindow: the newest whole messages")
    assert described["full"] == " ".join(
        (type(get_strategy("full")).__doc__ or "").strip().split("\n\n")[0].split()
    ).replace("``", "")
    assert "strategies" in render_html(results)
