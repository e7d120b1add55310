"""``ctxwindow eval``: its options, its help (the datasets and strategies), and the command.

The command checks its options and hands them to ``ctxwindow.eval.command``,
imported only when it runs, as the registries its help lists are read only
when the help is shown: the other commands pay for neither.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

from ctxwindow.cli_options import EstimateOption, ModelConfigOption, use_model_options
from ctxwindow.cli_output import fail_as_given
from ctxwindow.errors import CtxWindowError

# The options of ``ctxwindow eval``, named so the command reads as a list of them.
DatasetOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="SPEC",
        help="A dataset: builtin:NAME, locomo:PATH, longmemeval:PATH, beam:PATH or a .json/.jsonl"
        " file (the forms are listed below); repeat for several. Default: builtin:all.",
    ),
]
StrategiesOption = Annotated[
    str,
    typer.Option(
        metavar="NAMES",
        show_default=False,
        help="Comma-separated strategy names (listed below). Default: message_window,"
        " token_window, hybrid, full.",
    ),
]
BudgetsOption = Annotated[
    str,
    typer.Option(
        metavar="N,N,...",
        show_default=False,
        help="Comma-separated token budgets. Default: 1024, 2048, 4096, 8192, 16384.",
    ),
]
EvalModelOption = Annotated[
    str,
    typer.Option(
        metavar="NAME", help="Model whose tokenizer counts the contexts and whose prices cost them."
    ),
]
OutOption = Annotated[
    Path,
    typer.Option(
        metavar="DIR", help="Folder for results.json, report.html and the charts (PNG files)."
    ),
]
SkipInvalidOption = Annotated[
    bool,
    typer.Option(
        "--skip-invalid",
        help="Leave out invalid conversations and questions (each is reported) instead of"
        " stopping.",
    ),
]
IncludeUnanswerableOption = Annotated[
    bool,
    typer.Option(
        "--include-unanswerable",
        help="locomo:/longmemeval: also measure questions with no answer in the conversation.",
    ),
]
LLMBaseURLOption = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="OpenAI-compatible endpoint whose model answers the questions (scored against the"
        " answers; needs --llm-model).",
    ),
]
LLMModelOption = Annotated[
    str | None, typer.Option(metavar="NAME", help="Model name at the --llm-base-url endpoint.")
]
LLMJudgeOption = Annotated[
    bool,
    typer.Option(
        "--llm-judge", help="Let that model grade each answer (YES/NO) instead of string matching."
    ),
]
ReplayOption = Annotated[
    bool,
    typer.Option(
        "--replay",
        help="Also replay every user turn: the share a provider's prompt cache serves and "
        "the input cost per turn, priced for --model (docs/caching.md).",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        metavar="N",
        help="Processes measuring conversations in parallel (default: one per CPU).",
    ),
]

EmbeddingCacheOption = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        show_default=False,
        help="SQLite file that keeps the embedders' vectors for later runs (a text is embedded"
        " once per model). Default: $CTXWINDOW_EMBEDDING_CACHE, else embeddings.sqlite3 in"
        " ~/.cache/ctxwindow.",
    ),
]
NoEmbeddingCacheOption = Annotated[
    bool,
    typer.Option(
        "--no-embedding-cache",
        help="Keep no vectors on disk: every text is embedded again (as on a first run).",
    ),
]


class EvalCommand(typer.core.TyperCommand):
    """``ctxwindow eval``, whose help ends with its datasets and strategies, read from their
    registries when the help is shown (so listing them costs the other commands nothing)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.epilog = _eval_choices(_help_width())
        super().format_help(ctx, formatter)


def _eval_choices(width: int) -> str:
    from rich.markup import escape

    from ctxwindow.eval import choices

    sections = [
        ("Datasets (--dataset SPEC)", choices.dataset_forms()),
        ("Built-in datasets (builtin:NAME)", choices.builtin_datasets()),
        ("Strategies (--strategies)", choices.strategies()),
    ]
    return "\n\n".join(
        f"[bold]{escape(title)}[/bold]\n" + escape(_rows(rows, width)) for title, rows in sections
    )


def _rows(rows: list[tuple[str, str]], width: int) -> str:
    """Name and description rows, the descriptions wrapped to ``width`` beside the names."""
    column = min(max(len(name) for name, _ in rows), 16) + 4
    lines = []
    for name, text in rows:
        first = f"  {name:<{column - 2}}" if len(name) <= column - 3 else None
        if first is None:
            lines.append(f"  {name}")
        wrapped = textwrap.wrap(
            text, max(width - column, 20), break_long_words=False, break_on_hyphens=False
        )
        lines.append((first or " " * column) + wrapped[0])
        lines += [" " * column + line for line in wrapped[1:]]
    return "\n".join(lines)


def _help_width() -> int:
    """The width the help is printed in (typer's rich console), less its padding."""
    from rich.console import Console

    fixed = os.environ.get("TERMINAL_WIDTH", "")
    return (int(fixed) if fixed.isdigit() else Console().width) - 2


def eval_command(
    dataset: DatasetOption = None,
    strategies: StrategiesOption = "message_window,token_window,hybrid,full",
    budgets: BudgetsOption = "1024,2048,4096,8192,16384",
    model: EvalModelOption = "gpt-4o",
    out: OutOption = Path("ctxwindow-report"),
    skip_invalid: SkipInvalidOption = False,
    include_unanswerable: IncludeUnanswerableOption = False,
    llm_base_url: LLMBaseURLOption = None,
    llm_model: LLMModelOption = None,
    llm_judge: LLMJudgeOption = False,
    workers: WorkersOption = None,
    estimate: EstimateOption = False,
    model_config: ModelConfigOption = None,
    replay: ReplayOption = False,
    embedding_cache: EmbeddingCacheOption = None,
    no_embedding_cache: NoEmbeddingCacheOption = False,
) -> None:
    """Measure context strategies and budgets; print a table, write a report.

    Writes DIR/results.json, DIR/report.html and the charts as PNG files
    (--out DIR). Progress goes to stderr: a bar on a terminal, a plain line
    every 5 % (or 30 s) otherwise.
    """
    from ctxwindow.eval.command import EvalOptions, run_command

    use_model_options(model_config, estimate)
    if embedding_cache is not None and no_embedding_cache:
        fail_as_given("--embedding-cache and --no-embedding-cache: give one or the other")
    if embedding_cache is not None and embedding_cache.is_dir():
        fail_as_given(f"--embedding-cache {embedding_cache} is a folder: name the file to keep")
    options = EvalOptions(
        datasets=dataset or ["builtin:all"],
        strategies=_split(strategies, "--strategies"),
        budgets=[_positive_int(b) for b in _split(budgets, "--budgets")],
        model=model,
        out=out,
        skip_invalid=skip_invalid,
        include_unanswerable=include_unanswerable,
        llm_base_url=llm_base_url,
        llm_model=llm_model,
        llm_judge=llm_judge,
        replay=replay,
        embedding_cache=False if no_embedding_cache else embedding_cache or True,
        **({"workers": workers} if workers is not None else {}),
    )
    try:
        run_command(options)
    except (CtxWindowError, ValueError, ImportError) as exc:
        fail_as_given(str(exc))


def _split(value: str, option: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        fail_as_given(f"{option} needs at least one value")
    return items


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        fail_as_given(f"--budgets: {value!r} is not a positive integer")
    return number
