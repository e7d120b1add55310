"""The command line as a new user meets it, run as the installed ``ctxwindow`` script.

Every problem with configuration or input is one line on stderr,
``ctxwindow: error: <where>: <what is wrong>``, and exit status 2, never a
traceback; ``--version``; a missing extra is said before any work; progress
is plain lines when stderr is not a terminal; help texts are whole at 80
columns and list the datasets and strategies.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest
import typer

from ctxwindow.cli import app
from ctxwindow.eval.builtin import BUILTIN
from ctxwindow.eval.choices import strategies
from ctxwindow.eval.strategies import strategy_names
from ctxwindow.extras import install_hint

SCRIPT = Path(sys.executable).parent / "ctxwindow"

# A sitecustomize that makes the top-level packages named in CTXWINDOW_TEST_BLOCK fail to
# import, as if their extra were not installed.
BLOCKER = """
import os, sys

class _Blocker:
    blocked = set(filter(None, os.environ.get("CTXWINDOW_TEST_BLOCK", "").split(",")))

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Blocker())
"""

SMALL_DATASET = "builtin:orders?turns=6&conversations=2"
NEEDS_TOML = pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without any CTXWINDOW_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXWINDOW_")}
    env.pop("COLUMNS", None)
    env.pop("TERMINAL_WIDTH", None)
    return {**env, **extra}


def run(
    *args: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env if env is not None else environment(),
        timeout=120,
        check=False,
    )


def blocking(tmp_path: Path, *packages: str) -> dict[str, str]:
    """An environment in which ``packages`` cannot be imported."""
    folder = tmp_path / "blocker"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    return environment(PYTHONPATH=str(folder), CTXWINDOW_TEST_BLOCK=",".join(packages))


def assert_one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit status 2, nothing on stdout, one ``ctxwindow: error:`` line holding ``fragments``."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxwindow: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# -- configuration: serve --config, --model-config, CTXWINDOW_* ----------------------------

MODEL_ENTRY = '[models."acme/*"]\ncontext_window = 4096\nestimate = true\n'

CONFIG_FILES = {
    "bad.toml": 'port = 8000\nhost = "127.0.0.1\n',
    "bad.json": '{"port": 8000,\n "host": }',
    "empty.json": "",
    "list.json": "[1, 2]",
    "latin1.json": '{"host": "caf\xe9"}',
    "unknown.toml": "port = 8000\nprot = 8001\n",
    "value.toml": 'budget_ratio = "half"\n',
    "workers.json": '{"store": "memory://", "workers": 2}',
    "models_bad.toml": "[models\nbroken",
    "models_entry.toml": '[models."acme/*"]\ncontext_window = -1\nestimate = true\n',
    "models_ok.toml": MODEL_ENTRY,
}


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    for name, text in CONFIG_FILES.items():
        encoding = "latin-1" if name.startswith("latin1") else "utf-8"
        (tmp_path / name).write_text(text, encoding=encoding)
    (tmp_path / "folder.toml").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--config", "missing.toml"], {}, "missing.toml: cannot read the file: No such file"),
        (["--config", "folder.toml"], {}, "folder.toml: cannot read the file: Is a directory"),
        pytest.param(
            ["--config", "bad.toml"],
            {},
            "bad.toml: not valid TOML: Illegal character '\\n' (at line 2, column 18)",
            marks=NEEDS_TOML,
        ),
        (["--config", "bad.json"], {}, "bad.json: not valid JSON at line 2, column 10:"),
        (["--config", "empty.json"], {}, "empty.json: the file is empty"),
        (["--config", "list.json"], {}, "list.json: a settings file holds one table"),
        (["--config", "latin1.json"], {}, "latin1.json: not UTF-8 text"),
        pytest.param(
            ["--config", "unknown.toml"],
            {},
            "unknown.toml: unknown setting 'prot'; did you mean",
            marks=NEEDS_TOML,
        ),
        pytest.param(
            ["--config", "value.toml"],
            {},
            "value.toml: budget_ratio: Input should be a valid number",
            marks=NEEDS_TOML,
        ),
        (["--config", "workers.json"], {}, "workers.json: workers: an in-memory store"),
        (
            [],
            {"CTXWINDOW_LOCK_TIMEOUT": "soon"},
            "CTXWINDOW_LOCK_TIMEOUT: Input should be a valid number",
        ),
        ([], {"CTXWINDOW_BUDGETS": "{0.5}"}, "CTXWINDOW_BUDGETS: not valid JSON"),
        ([], {"CTXWINDOW_UNKNOWN_MODELS": "maybe"}, "CTXWINDOW_UNKNOWN_MODELS: Input should be"),
        ([], {"CTXWINDOW_MODEL_CONFIG": "nope.toml"}, "nope.toml: cannot read the file"),
        (
            [],
            {"CTXWINDOW_MODELS": '{"x": {"context_window": 9}}'},
            "CTXWINDOW_MODELS: models['x']: needs a counter",
        ),
        pytest.param(
            ["--model-config", "models_bad.toml"],
            {},
            "models_bad.toml: not valid TOML",
            marks=NEEDS_TOML,
        ),
        pytest.param(
            ["--model-config", "models_entry.toml"],
            {},
            "models_entry.toml: models['acme/*'].context_window",
            marks=NEEDS_TOML,
        ),
        (["--store", "mysql://user:hunter2@db/x"], {}, "--store: unknown store URL scheme"),
        (["--store", "sessions.db"], {}, "for a SQLite file write 'sqlite:///sessions.db'"),
        (["--workers", "0"], {}, "--workers: Input should be greater than or equal to 1"),
    ],
)
def test_serve_says_each_config_problem_in_one_line(
    configs: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    done = run("serve", "--port", "0", *args, cwd=configs, env=environment(**env))
    line = assert_one_line_error(done, says)
    assert "hunter2" not in line


def test_a_password_in_a_bad_upstream_url_is_not_shown(tmp_path: Path) -> None:
    done = run("serve", "--upstream", "ftp://me:hunter2@example.invalid/v1", cwd=tmp_path)
    assert "hunter2" not in assert_one_line_error(done, "--upstream: the upstream must be")


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        pytest.param(
            ["--model-config", "models_bad.toml"],
            {},
            "models_bad.toml: not valid TOML",
            marks=NEEDS_TOML,
        ),
        (["--model-config", "missing.json"], {}, "missing.json: cannot read the file"),
        pytest.param(
            [],
            {"CTXWINDOW_MODEL_CONFIG": "models_entry.toml"},
            "models_entry.toml: models['acme/*']",
            marks=NEEDS_TOML,
        ),
        ([], {"CTXWINDOW_MODELS": "[1]"}, "CTXWINDOW_MODELS: a JSON object of model entries"),
        ([], {"CTXWINDOW_UNKNOWN_MODELS": "maybe"}, "CTXWINDOW_UNKNOWN_MODELS: must be one of"),
    ],
)
@pytest.mark.parametrize("command", ["count", "eval"])
def test_count_and_eval_say_each_config_problem_in_one_line(
    configs: Path, command: str, args: list[str], env: dict[str, str], says: str
) -> None:
    extra = ["--dataset", SMALL_DATASET, "--out", "out"] if command == "eval" else []
    done = run(command, *extra, *args, cwd=configs, stdin="[]", env=environment(**env))
    assert_one_line_error(done, says)
    assert not (configs / "out").exists()


@NEEDS_TOML
def test_a_good_model_config_is_used(configs: Path) -> None:
    done = run(
        "count", "--model", "acme/7b", "--model-config", "models_ok.toml", cwd=configs,
        stdin='[{"role": "user", "content": "hi"}]',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


# -- input of ctxwindow count -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "content", "says"),
    [
        ("empty.json", "", "empty.json is empty"),
        ("blank.json", " \n", "blank.json is empty"),
        ("-", "", "standard input is empty"),
        (
            "bad.json",
            '[\n  {"role": "user" "content": "x"}]',
            "bad.json is not valid JSON at line 2",
        ),
        ("-", '{"role": "user"}', "standard input must be a JSON array of chat messages"),
        (
            "roleless.json",
            '[{"role": "user", "content": "a"}, {"content": "b"}]',
            "roleless.json: message 1: has no 'role' (one of system, developer, user,",
        ),
        (
            "wizard.json",
            '[{"role": "wizard", "content": "b"}]',
            "wizard.json: message 0: unknown role 'wizard' (expected one of system,",
        ),
        (
            "body.json",
            '{"messages": [{"role": "user"}]}',
            "body.json: 'messages': message 0: user message has no 'content'",
        ),
        ("body.json", '{"messages": {}}', "body.json: 'messages' must be a JSON array"),
        (
            "tools.json",
            '{"messages": [], "tools": [{"type": "function"}]}',
            "tools.json: 'tools': tool 0 has no function name",
        ),
        ("missing.json", None, "cannot read missing.json: No such file or directory"),
    ],
)
def test_count_input_problems_name_the_file_and_the_place(
    tmp_path: Path, file: str, content: str | None, says: str
) -> None:
    stdin = ""
    if file == "-":
        stdin = content or ""
    elif content is not None:
        (tmp_path / file).write_text(content, encoding="utf-8")
    assert_one_line_error(run("count", file, cwd=tmp_path, stdin=stdin), says)


def test_count_names_a_bad_tools_file_and_non_utf8_input(tmp_path: Path) -> None:
    (tmp_path / "tools.json").write_text("[{", encoding="utf-8")
    done = run("count", "--tools", "tools.json", cwd=tmp_path, stdin="[]")
    assert_one_line_error(done, "tools.json is not valid JSON at line 1, column 3")
    (tmp_path / "latin1.json").write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    assert_one_line_error(run("count", "latin1.json", cwd=tmp_path), "latin1.json is not UTF-8")


# -- --version ----------------------------------------------------------------------------------


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    done = run("--version", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"ctxwindow {metadata.version('ctxwindow')}\n"


# -- extras, checked before any work ---------------------------------------------------------


@pytest.mark.parametrize(
    ("blocked", "args", "says"),
    [
        (("matplotlib",), [], f"needs matplotlib: {install_hint('eval')}"),
        (
            ("openai",),
            ["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m"],
            f"needs openai: {install_hint('eval')}",
        ),
        (
            ("sentence_transformers",),
            ["--strategies", "token_window,hybrid_minilm"],
            "the strategy 'hybrid_minilm' needs sentence_transformers:"
            f" {install_hint('embeddings')}",
        ),
    ],
)
def test_eval_checks_its_extras_before_any_work(
    tmp_path: Path, blocked: tuple[str, ...], args: list[str], says: str
) -> None:
    """The error is the first and only thing said: no dataset loaded, no progress, no report."""
    done = run(
        "eval", "--dataset", SMALL_DATASET, "--out", "out", *args,
        cwd=tmp_path, env=blocking(tmp_path, *blocked),
    )  # fmt: skip
    assert_one_line_error(done, says)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("blocked", "args", "says"),
    [
        (("fastapi",), [], f"ctxwindow serve needs fastapi: {install_hint('server')}"),
        (("fastapi_offline",), [], f"needs fastapi_offline: {install_hint('server')}"),
        (("uvicorn",), [], f"needs uvicorn: {install_hint('server')}"),
        (("redis",), ["--store", "redis://127.0.0.1:9/0"], install_hint("redis")),
        (
            ("psycopg",),
            ["--store", "postgresql://127.0.0.1:9/db"],
            install_hint("postgres"),
        ),
    ],
)
def test_serve_checks_its_extras_before_it_starts(
    tmp_path: Path, blocked: tuple[str, ...], args: list[str], says: str
) -> None:
    done = run("serve", "--port", "0", *args, cwd=tmp_path, env=blocking(tmp_path, *blocked))
    assert_one_line_error(done, says)


def test_serve_checks_the_extra_of_a_postgresql_archive(tmp_path: Path) -> None:
    env = blocking(tmp_path, "psycopg")
    env["CTXWINDOW_ARCHIVE"] = "postgresql://127.0.0.1:9/db"
    done = run("serve", "--port", "0", "--store", "memory://", cwd=tmp_path, env=env)
    assert_one_line_error(done, install_hint("postgres"))


# -- progress -----------------------------------------------------------------------------------

PROGRESS_LINE = re.compile(r"eval: (\d+)/(\d+) steps \((\d+) %\), \d+:\d\d:\d\d")
MATPLOTLIB_NOTICE = "Matplotlib is building the font cache"
EVAL_ARGS = ["--strategies", "token_window", "--budgets", "500,1000,2000", "--workers", "1"]


def test_piped_eval_prints_progress_as_plain_lines(tmp_path: Path) -> None:
    done = run("eval", "--dataset", SMALL_DATASET, *EVAL_ARGS, "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "\x1b" not in done.stderr
    # matplotlib's own notice, the first time a process finds no font cache in its
    # MPLCONFIGDIR (which run of the suite imports it first varies): not ctxwindow's output
    lines = [line for line in done.stderr.splitlines() if not line.startswith(MATPLOTLIB_NOTICE)]
    matches = [PROGRESS_LINE.fullmatch(line) for line in lines]
    counts = [tuple(int(group) for group in match.groups()) for match in matches if match]
    assert counts and len(counts) == len(matches), done.stderr
    total = counts[0][1]
    assert counts[0] == (0, total, 0) and counts[-1] == (total, total, 100)
    steps = [step for step, _, _ in counts]
    assert steps == sorted(set(steps))
    assert len(counts) <= 22  # about every 5 %, not a line per step
    assert "Report:" in done.stdout


def test_eval_on_a_terminal_keeps_the_bar(tmp_path: Path) -> None:
    """With stderr on a terminal, the progress is rich's bar, not the plain lines."""
    main, terminal = pty.openpty()
    said: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(main, said))
    try:
        child = subprocess.Popen(
            [str(SCRIPT), "eval", "--dataset", SMALL_DATASET, *EVAL_ARGS, "--out", "out"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal,
            cwd=tmp_path, env=environment(TERM="xterm"),
        )  # fmt: skip
    finally:
        os.close(terminal)  # the child's copy stays open until it ends
    reader.start()
    out, _ = child.communicate(timeout=120)
    reader.join(30)
    os.close(main)
    shown = b"".join(said).decode("utf-8", "replace")
    assert child.returncode == 0, shown
    assert "evaluating" in shown and not PROGRESS_LINE.search(shown)
    assert b"Report:" in out


def _drain(fd: int, into: list[bytes]) -> None:
    """Read a terminal until its other end is closed."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the last writer is gone
            return
        if not chunk:
            return
        into.append(chunk)


# -- usage errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nope"], "No such command 'nope'; see 'ctxwindow --help'"),
        (
            ["--verbose"],
            "No such option: --verbose (did you mean --version?); see 'ctxwindow --help'",
        ),
        (
            ["eval", "--strategis", "token_window"],
            "No such option: --strategis (did you mean --strategies?); see 'ctxwindow eval --help'",
        ),
        (["eval", "--workers", "0"], "'--workers': 0 is not in the range x>=1"),
        (["count", "--jsn"], "No such option: --jsn (did you mean --json?)"),
        (
            ["count", "--model"],
            "Option '--model' requires an argument; see 'ctxwindow count --help'",
        ),
        (
            ["count", "a.json", "b.json"],
            "unexpected extra argument(s) (b.json); see 'ctxwindow count",
        ),
        (["serve", "--port", "octante"], "'--port': 'octante' is not a valid integer"),
        (
            ["sessions", "lst"],
            "No such command 'lst'. Did you mean 'list'?; see 'ctxwindow sessions",
        ),
        (["sessions", "list", "--limit", "0"], "see 'ctxwindow sessions list --help'"),
        (["sessions", "show"], "Missing argument 'SESSION'; see 'ctxwindow sessions show --help'"),
        (
            ["sessions", "export", "会话", "--format", "xml"],
            "'xml' is not one of 'json', 'jsonl'; see 'ctxwindow sessions export --help'",
        ),
        (["sessions", "delete", "会话", "--tenant"], "Option '--tenant' requires an argument"),
    ],
)
def test_usage_errors_are_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    """A typo in a flag, a missing or bad value: one line naming the help to read, not
    click's box; nothing runs (no store opened, no dataset loaded)."""
    assert_one_line_error(run(*args, cwd=tmp_path), says)
    assert list(tmp_path.iterdir()) == []


def test_no_arguments_print_the_help(tmp_path: Path) -> None:
    for command in [[], ["sessions"]]:
        done = run(*command, cwd=tmp_path)
        assert done.returncode == 2 and "Usage: ctxwindow" in done.stdout + done.stderr


# -- help ---------------------------------------------------------------------------------------


def help_text(*command: str, tmp_path: Path) -> str:
    done = run(*command, "--help", cwd=tmp_path, env=environment(COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    return done.stdout


def flat(text: str) -> str:
    """Help text on one line, without the boxes' borders."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


COMMANDS = [
    [], ["count"], ["eval"], ["serve"], ["sessions"],
    ["sessions", "list"], ["sessions", "show"], ["sessions", "export"], ["sessions", "delete"],
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_text_is_whole_at_80_columns(tmp_path: Path, command: list[str]) -> None:
    text = help_text(*command, tmp_path=tmp_path)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    click_command = typer.main.get_command(app)
    for name in command:
        click_command = click_command.commands[name]  # type: ignore[attr-defined]
    for param in click_command.params:
        if getattr(param, "help", None):
            assert " ".join(param.help.split()) in flat(text), param.name


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_shows_flags_as_flags(tmp_path: Path, command: list[str]) -> None:
    """A flag's line is its name and its help, with no value type after the name (typer
    0.29 wrote ``--json <bool>``); an option that takes a value shows its metavar."""
    text = help_text(*command, tmp_path=tmp_path)
    assert not re.search(r"<[a-z_]+>", text), text
    click_command = typer.main.get_command(app)
    for name in command:
        click_command = click_command.commands[name]  # type: ignore[attr-defined]
    for param in click_command.params:
        name = next((o for o in param.opts if o.startswith("--")), None)
        if name is None or param.param_type_name != "option":
            continue
        rows = (re.sub(r"[│╭╮╰╯─]", " ", line).split() for line in text.splitlines())
        row = next(row for row in rows if row and row[0] == name)
        after = [word for word in row[1:] if word not in param.opts]
        if param.is_flag:  # type: ignore[attr-defined]
            assert " ".join(after).startswith(param.help.split()[0]), row
        elif param.metavar:
            assert after[0] == param.metavar, row


def test_eval_help_lists_datasets_and_strategies(tmp_path: Path) -> None:
    text = flat(help_text("eval", tmp_path=tmp_path))
    for form in ("builtin:NAME", "locomo:PATH", "longmemeval:PATH", ".jsonl"):
        assert form in text
    for scenario in [*BUILTIN, "all"]:
        assert f" {scenario} " in text
    for name, description in strategies():
        assert f"{name} {description}" in text
    assert {name for name, _ in strategies()} == set(strategy_names())


def test_the_help_lists_what_registries_hold(tmp_path: Path) -> None:
    """A strategy registered by a plug-in shows up in the help, with its description."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(
        "from ctxwindow.eval.strategies import register_strategy\n"
        "from ctxwindow.eval.window_strategies import FullHistory\n"
        "class Mine(FullHistory):\n"
        '    """My own strategy, registered by a plug-in."""\n'
        "register_strategy('mine', Mine)\n",
        encoding="utf-8",
    )
    env = environment(COLUMNS="80", PYTHONPATH=str(plugin))
    done = run("eval", "--help", cwd=tmp_path, env=env)
    assert "mine My own strategy, registered by a plug-in." in flat(done.stdout), done.stderr


def test_help_says_what_the_json_options_read(tmp_path: Path) -> None:
    text = flat(help_text("count", tmp_path=tmp_path))
    assert "JSON file of chat messages" in text and json.dumps("messages") in text
