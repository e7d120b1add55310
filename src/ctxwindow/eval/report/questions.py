"""The per-question table: what became of each question's evidence in every run, filterable.

It reads the top-level ``"questions"`` list of the results and each run's
``"outcomes"``, one letter a question in that list's order (``OUTCOMES``, the
runner's letters). The filters (text, category, outcome for any run or one
strategy at one budget) are a few lines of this module's own inline script;
without script the whole table shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ctxwindow.eval.report.formats import budget_labels
from ctxwindow.eval.report.runs import Run, by_strategy

# The runner's outcome letters (ctxwindow.eval.runner.OUTCOMES): mark, meaning.
OUTCOMES = {
    "k": ("✓", "kept whole"),
    "c": ("≈", "compressed or summarized, the answer in the compressed form of the evidence"),
    "p": ("½", "partly lost"),
    "l": ("✗", "lost"),
}
# The outcome filter: the letters a row must have (for the chosen run, or any), label.
OUTCOME_CHOICES = (
    ("", "any"),
    ("pl", "lost, partly or wholly"),
    ("l", "lost wholly"),
    ("p", "partly lost"),
    ("c", "compressed, the answer in it"),
    ("k", "kept whole"),
)
SCRIPT = """
(() => {
  const form = document.getElementById("q-filters");
  const rows = Array.from(document.querySelectorAll("#q-table tbody tr"));
  const texts = rows.map((row) =>
    Array.from(row.querySelectorAll("td.t"), (cell) => cell.textContent).join(" ").toLowerCase());
  function show() {
    const words = form.elements.search.value.toLowerCase().split(/\\s+/).filter(Boolean);
    const category = form.elements.category.value;
    const wanted = form.elements.outcome.value;
    const run = form.elements.run.value;
    let shown = 0;
    rows.forEach((row, i) => {
      const all = row.dataset.outcomes;
      const outcomes = run === "" ? all : all.charAt(Number(run));
      row.hidden = !(words.every((word) => texts[i].includes(word))
        && (category === "" || row.dataset.category === category)
        && (wanted === "" || Array.from(outcomes).some((o) => wanted.includes(o))));
      shown += row.hidden ? 0 : 1;
    });
    document.getElementById("q-count").textContent = `${shown} of ${rows.length} questions`;
  }
  form.addEventListener("input", show);
  form.addEventListener("change", show);
  form.addEventListener("submit", (event) => event.preventDefault());
  form.addEventListener("reset", () => setTimeout(show));
  show();
})();
"""


def questions_section(
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> str:
    """The section, or "" when the results have no per-question outcomes."""
    questions = results.get("questions")
    if not isinstance(questions, list) or not questions:
        return ""
    columns = [run for run in runs if _has_outcomes(run, len(questions))]
    if not columns:
        return ""
    return "\n".join([
        "<h2 id=questions>Question by question</h2>",
        _intro(),
        _filters(questions, columns),
        _table(questions, columns, colors),
        f"<script>{SCRIPT}</script>",
    ])  # fmt: skip


def _has_outcomes(run: Run, n: int) -> bool:
    outcomes = run.metrics.get("outcomes")
    return isinstance(outcomes, str) and len(outcomes) == n


def _intro() -> str:
    marks = " ".join(
        f"<span class='o {letter}'>{mark}</span> {escape(meaning)}"
        for letter, (mark, meaning) in OUTCOMES.items()
    )
    return (
        "<p>A row per question, a column per strategy and budget: what became of the "
        f"question's evidence messages in the context built for it. {marks}. Filter below, "
        "e.g. the questions <em>lost</em> by one strategy at one budget.</p>"
    )


def _filters(questions: Sequence[Mapping[str, Any]], columns: Sequence[Run]) -> str:
    categories = sorted({str(q.get("category", "")) for q in questions})
    category_options = _options([("", "all"), *((c, c) for c in categories)])
    outcome_options = _options(OUTCOME_CHOICES)
    run_options = _options(
        [("", "any strategy and budget"), *((str(i), _run_text(r)) for i, r in enumerate(columns))]
    )
    return (
        "<form id=q-filters class=filters role=search aria-label='Filter the questions'>\n"
        "<span><label for=q-search>Search</label> <input type=search id=q-search name=search "
        "placeholder='words of a question, answer, id or conversation' size=34></span>\n"
        f"<span><label for=q-category>Category</label> <select id=q-category name=category>"
        f"{category_options}</select></span>\n"
        f"<span><label for=q-outcome>Outcome</label> <select id=q-outcome name=outcome>"
        f"{outcome_options}</select>\n"
        f"<label for=q-run>for</label> <select id=q-run name=run>{run_options}</select></span>\n"
        "<button type=reset>Clear</button>\n"
        f"<output id=q-count for='q-search q-category q-outcome q-run' aria-live=polite>"
        f"{len(questions)} questions</output>\n</form>"
    )


def _options(choices: Sequence[tuple[str, str]]) -> str:
    return "".join(
        f"<option value='{escape(value)}'>{escape(label)}</option>" for value, label in choices
    )


def _run_text(run: Run) -> str:
    if run.budget is None:
        return f"{run.strategy}, no budget"
    return f"{run.strategy} at {run.budget:,}"


def _table(
    questions: Sequence[Mapping[str, Any]], columns: Sequence[Run], colors: Mapping[str, str]
) -> str:
    rows = "\n".join(_row(i, question, columns) for i, question in enumerate(questions))
    return (
        "<div class='scroll questions' tabindex=0 role=region aria-labelledby=questions>"
        f"<table id=q-table>{_head(columns, colors)}\n<tbody>\n{rows}\n</tbody></table></div>"
    )


def _head(columns: Sequence[Run], colors: Mapping[str, str]) -> str:
    strategies = "".join(
        f"<th scope=colgroup colspan={len(group)} class=run-group>"
        f"<span class=swatch style='background:{colors.get(strategy, '#444444')}'></span>"
        f"{escape(strategy)}</th>"
        for strategy, group in by_strategy(columns).items()
    )
    labels = budget_labels(run.budget for run in columns if run.budget is not None)
    budgets = "".join(
        f"<th scope=col class=budget title='{escape(_run_text(run))}'>"
        f"{'∞' if run.budget is None else labels[run.budget]}</th>"
        for run in columns
    )
    return (
        "<thead><tr><th scope=col rowspan=2>Question</th><th scope=col rowspan=2>Category</th>"
        f"{strategies}</tr>\n<tr>{budgets}</tr></thead>"
    )


def _where(conversation: str, qid: str) -> str:
    """``"orders-en-0 · q1"``; just the id when it names its conversation (LoCoMo's do)."""
    return qid if qid.startswith(conversation) else f"{conversation} · {qid}"


def _row(index: int, question: Mapping[str, Any], columns: Sequence[Run]) -> str:
    outcomes = "".join(str(run.metrics["outcomes"][index]) for run in columns)
    cells = "".join(
        f"<td class='o {escape(letter)}'>{OUTCOMES.get(letter, ('?', ''))[0]}</td>"
        for letter in outcomes
    )
    category = escape(str(question.get("category", "")))
    answer = question.get("answer")
    answered = f"<div class=answer>{escape(str(answer))}</div>" if answer else ""
    where = _where(str(question.get("conversation", "")), str(question.get("id", "")))
    return (
        f"<tr data-category='{category}' data-outcomes='{escape(outcomes)}'>"
        f"<td class=t><div class=qid>{escape(where)}</div>"
        f"{escape(str(question.get('question', '')))}{answered}</td>"
        f"<td class=t>{category}</td>{cells}</tr>"
    )
