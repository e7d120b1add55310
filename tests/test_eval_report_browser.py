"""The eval report in a real browser (headless chromium, tests/support/browser.py): what a person
reading it would look for.

One report per module, from a small real run of built-in datasets: the Chinese
manual (its categories renamed in Chinese, so chart labels are CJK) and English
orders, with a strategy of our own under a Chinese name. The page is opened as
a file with every other request refused.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from ctxwindow.eval import register_strategy, unregister_strategy
from ctxwindow.eval.builtin import builtin_dataset
from ctxwindow.eval.loaders import load_dataset
from ctxwindow.eval.report import write_report
from ctxwindow.eval.runner import run_eval
from ctxwindow.eval.window_strategies import HybridNoRecall

from .support.browser import new_page, screenshot

CJK_STRATEGY = "混合窗口"
CATEGORIES_ZH = {"document": "说明书", "single-hop": "单跳"}
STRATEGIES = ["token_window", "hybrid", CJK_STRATEGY, "full"]


class ChineseHybrid(HybridNoRecall):
    name = CJK_STRATEGY


def chinese_dataset(folder: Path) -> Path:
    """The Chinese manual with Chinese category names, and English orders, in one file."""
    data = builtin_dataset("manual-zh?turns=30")
    for conversation in data["conversations"]:
        for question in conversation["questions"]:
            question["category"] = CATEGORIES_ZH[question["category"]]
    data["conversations"] += builtin_dataset("orders-en?turns=30")["conversations"]
    path = folder / "说明书.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("eval-report")
    dataset, _ = load_dataset(str(chinese_dataset(folder)))
    register_strategy(CJK_STRATEGY, ChineseHybrid)
    try:
        results = run_eval(dataset, strategies=STRATEGIES, budgets=[1024, 4096])
    finally:
        unregister_strategy(CJK_STRATEGY)
    return write_report(results, folder / "out")


@pytest.fixture
def results(report: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((report.parent / "results.json").read_text("utf-8"))
    return loaded


@pytest.fixture
def page(browser: Any, report: Path) -> Iterator[Any]:
    """The report opened from its file; any request that is not for a file is refused and
    fails the test, as does any error the page logs or throws."""
    opened = new_page(browser)
    outside: list[str] = []

    def files_only(route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    def seen(request: Any) -> None:  # also what routing does not see
        if not request.url.startswith(("file:", "data:")):
            outside.append(request.url)

    opened.route("**/*", files_only)
    opened.on("request", seen)
    opened.goto(report.as_uri())
    opened.wait_for_load_state("load")
    yield opened
    assert outside == [], "the report asked for something outside itself"
    assert opened.errors == []
    opened.context.close()


def test_the_findings_come_first_and_name_real_strategies(page: Any) -> None:
    items = page.locator("ul.findings li")
    assert items.count() >= 3
    names = set(page.locator("ul.findings b").all_inner_texts())
    assert names and names <= set(STRATEGIES)
    assert "hybrid" in names
    assert any("%" in text for text in items.all_inner_texts())
    findings_top = page.locator("#findings").bounding_box()["y"]
    assert findings_top < page.locator("#results").bounding_box()["y"]
    assert page.locator("ul.findings").is_visible()


def test_charts_are_inline_svg_with_real_text(page: Any) -> None:
    charts = page.locator("figure svg")
    assert charts.count() == 3  # recall vs budget, vs tokens, by category
    for i in range(charts.count()):
        chart = charts.nth(i)
        assert chart.is_visible()
        assert chart.locator("text").count() > 10
        assert chart.get_attribute("role") == "img" and chart.get_attribute("aria-label")
    assert page.locator("img").count() == 0  # no chart is a picture of text


# Draws each CJK character of an element in the element's font, large, on a canvas: a real
# glyph differs from every other character's and from the box of a character no font has.
GLYPHS = """
(element) => {
  const style = getComputedStyle(element);
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 72;
  const context = canvas.getContext("2d", {willReadFrequently: true});
  const draw = (character) => {
    context.clearRect(0, 0, 72, 72);
    context.font = `48px ${style.fontFamily}`;
    context.textBaseline = "top";
    context.fillText(character, 8, 8);
    return Array.from(context.getImageData(0, 0, 72, 72).data).join();
  };
  const characters = Array.from(element.textContent).filter((c) => /\\p{Script=Han}/u.test(c));
  const missing = draw("\\uE000");  // a private-use character: no font has a glyph for it
  const drawn = characters.map(draw);
  const box = element.getBoundingClientRect();
  return {
    characters: characters.length,
    unique: new Set(characters).size,
    distinct: new Set(drawn).size,
    likeMissing: drawn.filter((d) => d === missing).length,
    blank: drawn.filter((d) => !/[1-9]/.test(d)).length,
    width: box.width,
    height: box.height,
  };
}
"""


@pytest.mark.parametrize(
    "selector",
    [
        f"figure svg text:text-is('{CJK_STRATEGY}')",  # a heat map row
        "figure svg text:has-text('说明书 (n=')",  # a heat map panel
        "figure svg text:has-text('.json')",  # the subtitle: the dataset's file name
        "td.t:has-text('电池')",  # a question in the table
    ],
)
def test_cjk_text_is_drawn_with_real_glyphs(page: Any, selector: str) -> None:
    element = page.locator(selector).first
    measured = element.evaluate(GLYPHS)
    assert measured["characters"] >= 2, measured
    assert measured["width"] > 0 and measured["height"] > 0, measured
    assert measured["distinct"] == measured["unique"], measured  # no two drawn the same
    assert measured["likeMissing"] == 0 and measured["blank"] == 0, measured


OVERLAPS = """
(svg) => {
  const texts = Array.from(svg.querySelectorAll("text")).filter((t) => t.textContent.trim());
  const boxes = texts.map((t) => [t.textContent, t.getBoundingClientRect()]);
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const [a, ra] = boxes[i], [b, rb] = boxes[j];
      const wide = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const high = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (wide > 1 && high > 1) overlaps.push(`${a} / ${b}`);
    }
  }
  return {texts: boxes.length, empty: boxes.filter(([, r]) => r.width === 0).length, overlaps};
}
"""


def test_no_two_texts_of_a_chart_overlap(page: Any) -> None:
    charts = page.locator("figure svg")
    for i in range(charts.count()):
        found = charts.nth(i).evaluate(OVERLAPS)
        label = charts.nth(i).get_attribute("aria-label")
        assert found["texts"] > 10 and found["empty"] == 0, label
        assert found["overlaps"] == [], label


def shown_rows(page: Any) -> list[str]:
    return [
        row.text_content()
        for row in page.locator("#q-table tbody tr").all()
        if row.is_visible()
    ]  # fmt: skip


def test_typing_in_the_search_box_filters_the_questions(page: Any, results: dict[str, Any]) -> None:
    total = len(results["questions"])
    assert len(shown_rows(page)) == total
    page.fill("#q-search", "电池")
    rows = shown_rows(page)
    asking = [q for q in results["questions"] if "电池" in q["question"] + q["answer"]]
    assert 0 < len(rows) == len(asking) < total
    assert all("电池" in row for row in rows)
    assert page.locator("#q-count").inner_text() == f"{len(rows)} of {total} questions"
    page.fill("#q-search", "tracking number")
    assert 0 < len(shown_rows(page)) < total
    assert all("tracking number" in row for row in shown_rows(page))
    page.fill("#q-search", "")
    assert len(shown_rows(page)) == total


def test_choosing_an_outcome_shows_the_questions_one_run_lost(
    page: Any, results: dict[str, Any]
) -> None:
    outcomes = results["results"]["token_window"]["1024"]["outcomes"]
    lost = [i for i, letter in enumerate(outcomes) if letter in "pl"]
    assert 0 < len(lost) < len(outcomes)
    page.select_option("#q-outcome", label="lost, partly or wholly")
    page.select_option("#q-run", label="token_window at 1,024")
    rows = shown_rows(page)
    assert len(rows) == len(lost)
    expected = [results["questions"][i]["question"] for i in lost]
    assert all(question in row for question, row in zip(expected, rows, strict=True))
    page.select_option("#q-category", label="说明书")
    manual = [i for i in lost if results["questions"][i]["category"] == "说明书"]
    assert len(shown_rows(page)) == len(manual)
    page.click("button[type=reset]")  # the form resets, then the filter runs (a task later)
    total = len(outcomes)
    page.wait_for_function(f"document.getElementById('q-count').textContent.startsWith('{total} ')")
    assert len(shown_rows(page)) == total
    screenshot(page, "report-questions")


def test_the_filters_are_labelled_and_reached_with_the_tab_key(page: Any) -> None:
    controls = ["q-search", "q-category", "q-outcome", "q-run"]
    for control in controls:
        label = page.locator(f"label[for={control}]")
        assert label.count() == 1 and label.inner_text().strip()
        assert page.locator(f"#{control}").evaluate("(e) => e.labels.length") == 1
    reached = []
    for _ in range(80):
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement.id")
        reached.append(focused)
        if focused == controls[-1]:
            break
    assert [c for c in reached if c in controls] == controls
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.id") == "q-search"
    page.keyboard.type("电池")
    assert 0 < len(shown_rows(page)) < page.locator("#q-table tbody tr").count()


def test_a_screenshot_of_the_whole_report(page: Any) -> None:
    png = screenshot(page, "report", full_page=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(png))
    width, height = image.size
    assert width == 1280 and height > 3000
    assert len(png) > 150_000
    colors = image.convert("RGB").resize((256, 256)).getcolors(256 * 256) or []
    assert len(colors) > 500  # charts, tables and text, not a blank page
