"""Every shell and Python block of README.md and docs/*.md is run here, as a reader would.

A reader copies a block and runs it: the block must work as written. Each
block runs in a temporary folder (one per document: the blocks of a document
run in order, the Python ones in one namespace, as a reader following the page
would), with ``ctxwindow`` on the ``PATH``, against a live ``ctxwindow serve``
wherever the block names ``http://127.0.0.1:8000`` (the same service on a free
port, forwarding to fake upstreams of the three protocols: no LLM is reachable
here), and the test Redis and PostgreSQL where it names theirs.

``console`` blocks are commands (``$ …``) and what they print: each command
must exit 0, or non-zero when what it prints says ``error:``, and print the
lines shown, if any (``…`` stands for any lines; the reader's folder, where
the blocks run, is ``/home/me``). Markers, on the lines right above a
block's fence, change that:

- ``<!-- doc-test: skip: REASON -->``: not run; REASON says what outside
  service or machine state it needs (an LLM provider's key, a browser…);
- ``<!-- doc-test: run by tests/FILE.py -->``: run by that test, which gives it
  what the page leaves to the reader (a chat model, a running agent…);
- ``<!-- doc-test: output not compared: REASON -->``: run, exit status checked,
  the printed lines not compared (REASON: times, dates…).

What a page takes from the reader (a ``store`` it opened, ``messages`` it
has) is set up in ``GIVEN`` below, per page: nothing else is added.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxwindow.server import Settings, create_app

from .support.live_server import serving
from .support.protocol_upstreams import FakeMessages, FakeResponses

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "sh", "bash", "console")
FENCE = re.compile(
    r"(?P<marks>(?:^<!-- doc-test: [^\n]*-->\n)*)^```(?P<lang>[a-z]*)\n(?P<code>.*?)^```",
    re.S | re.M,
)
MARK = re.compile(r"<!-- doc-test: (?P<kind>skip|run by|output not compared):? (?P<why>.*?) -->")
SERVICE = "http://127.0.0.1:8000"
REPLY = "It left the Leeds depot this morning."


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    lang: str
    code: str
    marks: tuple[tuple[str, str], ...]
    section: str  # the ``## `` heading the block is under ("" before the first)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    def mark(self, kind: str) -> str | None:
        return next((why for k, why in self.marks if k == kind), None)


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text("utf-8")
    found = []
    for match in FENCE.finditer(text):
        if match["lang"] not in LANGUAGES:
            continue
        marks = tuple((m["kind"], m["why"].strip()) for m in MARK.finditer(match["marks"]))
        line = text.count("\n", 0, match.start("lang")) + 1
        headings = re.findall(r"^## (.*)$", text[: match.start()], re.M)
        section = headings[-1] if headings else ""
        found.append(Block(doc, line, match["lang"], match["code"], marks, section))
    return found


ALL = [block for doc in DOCS for block in blocks(doc)]


def test_every_marker_is_well_formed() -> None:
    """A skip says why (what outside it needs); a 'run by' names a test that runs the page's
    section; a stray marker (a typo, one not right above a fence) is an error."""
    for doc in DOCS:
        text = doc.read_text("utf-8")
        written = len(re.findall(r"<!-- doc-test", text))
        attached = sum(len(b.marks) for b in blocks(doc))
        assert written == attached, f"{doc.name}: a doc-test marker not right above a block"
    for block in ALL:
        for kind, why in block.marks:
            if kind == "run by":
                test = ROOT / why
                assert test.is_file(), f"{block.where}: no test {why}"
                # the test takes the blocks of this section (tests/support/docs_examples.py)
                taken = re.findall(r'examples\(\s*"([^"]+)"', test.read_text("utf-8"))
                assert any(block.section.startswith(heading) for heading in taken), (
                    f"{block.where}: {why} runs no example of '## {block.section}'"
                )
            else:
                assert len(why) >= 15, f"{block.where}: say why ({kind}: {why!r})"


def test_there_are_blocks_to_run() -> None:
    run = [b for b in ALL if not b.mark("skip") and not b.mark("run by")]
    assert len(run) >= 30, len(run)


# --- what the pages leave to the reader ---------------------------------------------------


def _chat_upstream(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if body.get("stream"):
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                 "model": body["model"], "choices": [
                     {"index": 0, "delta": {"role": "assistant", "content": REPLY},
                      "finish_reason": "stop"}]}  # fmt: skip
        return httpx.Response(
            200, text=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n",
            headers={"content-type": "text/event-stream"},
        )  # fmt: skip
    return httpx.Response(200, json={
        "id": "chatcmpl-doc", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17},
    })  # fmt: skip


def _upstream(request: httpx.Request) -> httpx.Response:
    """The three protocols' fake upstreams behind one URL, by the path asked for."""
    path = request.url.path
    if path.endswith("/models"):
        return httpx.Response(200, json={"object": "list", "data": []})
    if path.endswith("/responses"):
        return FakeResponses().handle(request)
    if path.endswith("/messages"):
        return FakeMessages().handle(request)
    return _chat_upstream(request)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``ctxwindow serve``'s app on a free port, SQLite store, fake upstreams."""
    folder = tmp_path_factory.mktemp("service")
    settings = Settings(
        store=f"sqlite:///{folder / 'sessions.db'}", upstream="http://upstream.test/v1",
        archive="off",
    )  # fmt: skip
    with serving(create_app(settings, upstream_transport=httpx.MockTransport(_upstream))) as url:
        yield url


def _stores_given(ns: dict[str, Any], folder: Path) -> None:
    from ctxwindow import Entry

    ns.update(
        handle=lambda page: None,
        window_state_json=json.dumps({"window": "state", "窗口": "🪟"}),
        entry=Entry({"role": "assistant", "content": "Done."}, tokens=2, seq=0),
        reply_to=lambda history: Entry({"role": "assistant", "content": "OK"}, tokens=1, seq=0),
    )


def _context_given(ns: dict[str, Any], folder: Path) -> None:
    ns.update(
        question={"role": "user", "content": "Where is A-1042? 我的订单在哪里？"},
        llm=lambda messages: {"role": "assistant", "content": REPLY},
    )


def _readme_given(ns: dict[str, Any], folder: Path) -> None:
    """The reader's conversations: docs/eval.md's example of the dataset format."""
    (example,) = re.findall(r"```json\n(\{\"conversations\".*?)```", _page("docs/eval.md"), re.S)
    lines = [json.dumps(c, ensure_ascii=False) for c in json.loads(example)["conversations"]]
    (folder / "my_conversations.jsonl").write_text("\n".join(lines) + "\n", "utf-8")


def _cli_given(ns: dict[str, Any], folder: Path) -> None:
    """The files the page's commands read: OpenAI's counting-guide conversation (129
    tokens on gpt-4, as the guide's API call reported) and three broken inputs."""
    from .support.guide import GUIDE_MESSAGES

    (folder / "conversation.json").write_text(json.dumps(GUIDE_MESSAGES), "utf-8")
    (folder / "empty.json").write_text("", "utf-8")
    (folder / "broken.json").write_text('[\n  {"role": "user" "content": "hi"}\n]\n', "utf-8")
    request = {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！"}, {"content": "🎉"}]}  # fmt: skip
    (folder / "request.json").write_text(json.dumps(request, ensure_ascii=False), "utf-8")


def _server_given(ns: dict[str, Any], folder: Path) -> None:
    """What the testing example leaves to its reader: an upstream, a redactor, an archive."""
    from ctxwindow.archive import SQLiteArchive
    from ctxwindow.redact import Redactor

    ns.update(handler=_upstream, my_redactor=Redactor(), my_archive=SQLiteArchive("archive.db"))


def _tokens_given(ns: dict[str, Any], folder: Path) -> None:
    ns["messages"] = [{"role": "user", "content": "Hello, 世界 🎉"}]


# page -> what it takes from its reader, set up before its first block
GIVEN: dict[str, Callable[[dict[str, Any], Path], None]] = {
    "README.md": _readme_given,
    "docs/cli.md": _cli_given,
    "docs/context.md": _context_given,
    "docs/server.md": _server_given,
    "docs/stores.md": _stores_given,
    "docs/tokens.md": _tokens_given,
}


def _page(name: str) -> str:
    return (ROOT / name).read_text("utf-8")


# --- running the blocks ------------------------------------------------------------------

# Shell blocks run after this: `pip install` is resolved against the checkout (`.` is its
# folder), not done (the suite's environment stays as it is); `ctxwindow serve` is started on
# a free port, checked to answer, and stopped (it would run until stopped).
SHELL_PRELUDE = r"""
pip() {
  [ "$1" = install ] || { echo "doc-test: only pip install runs here" >&2; return 1; }
  (cd "$DOC_CHECKOUT" && python -m pip "$@" --dry-run --quiet --disable-pip-version-check)
}
ctxwindow() {
  if [ "$1" != serve ]; then command ctxwindow "$@"; return; fi
  command ctxwindow "$@" --port "$DOC_PORT" & local pid=$! tries=300
  until (exec 3<>"/dev/tcp/127.0.0.1/$DOC_PORT") 2>/dev/null; do
    kill -0 $pid 2>/dev/null || { wait $pid; return; }   # it stopped: its own status
    tries=$((tries - 1))
    [ $tries -gt 0 ] || { kill $pid; echo "doc-test: serve never answered" >&2; return 1; }
    sleep 0.2
  done
  kill -INT $pid && wait $pid
}
"""


def _env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(folder)  # nothing a block writes under ~ outlives the test
    env.pop("CTXWINDOW_MODEL_CONFIG", None)
    env["DOC_CHECKOUT"] = str(ROOT)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        env["DOC_PORT"] = str(probe.getsockname()[1])
    return env


def _run_python(block: Block, code: str, ns: dict[str, Any]) -> None:
    if code.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(code, ns, block.where, block.where, block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, out=lambda text: None)
        assert runner.failures == 0, f"{block.where}: the doctest's output differs"
        return
    try:
        exec(compile(code, block.where, "exec"), ns)
    except Exception as exc:
        raise AssertionError(f"{block.where}: {exc!r}") from exc


def _commands(code: str) -> list[tuple[str, list[str]]]:
    """A console block's ``$ command`` lines, each with the lines it prints."""
    found: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        else:
            assert found, f"output before any command: {line!r}"
            found[-1][1].append(line)
    return found


def _matches(expected: list[str], printed: list[str]) -> bool:
    """Line by line; ``…`` alone on a line stands for any lines."""
    if not expected:
        return not printed
    if expected[0].strip() == "…":
        return any(_matches(expected[1:], printed[i:]) for i in range(len(printed) + 1))
    return (
        bool(printed)
        and expected[0].rstrip() == printed[0].rstrip()
        and _matches(expected[1:], printed[1:])
    )


def _run_console(block: Block, code: str, folder: Path) -> None:
    for command, expected in _commands(code):
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", SHELL_PRELUDE + command], cwd=folder, env=_env(folder),
            capture_output=True, text=True, timeout=600, input="", check=False,
        )  # fmt: skip
        # the reader works in their home folder, which the page calls /home/me
        printed = (done.stdout + done.stderr).replace(str(folder), "/home/me").splitlines()
        failed = any("error:" in line for line in expected)
        assert (done.returncode != 0) == failed, (
            f"{block.where}: `{command}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
        if expected and block.mark("output not compared") is None:
            assert _matches(expected, printed), (
                f"{block.where}: `{command}` printed\n" + "\n".join(printed)
                + "\nwhere the page shows\n" + "\n".join(expected)
            )  # fmt: skip


def _run_shell(block: Block, code: str, folder: Path) -> None:
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", SHELL_PRELUDE + code], cwd=folder, env=_env(folder),
        capture_output=True, text=True, timeout=600, input="", check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{block.where}:\n{done.stdout}{done.stderr}"


@pytest.mark.slow  # docs/cli.md alone runs its commands for ~1 minute
@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_the_blocks_of_a_page_run(
    doc: Path, service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = [b for b in blocks(doc) if not b.mark("skip") and not b.mark("run by")]
    if not page:
        return  # a page without runnable blocks: nothing to check here
    folder = tmp_path / "reader"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("HOME", str(folder))
    ns: dict[str, Any] = {"__name__": "__doc__"}
    GIVEN.get(str(doc.relative_to(ROOT)), lambda ns, folder: None)(ns, folder)
    for block in page:
        code = block.code.replace(SERVICE, service)
        if block.lang == "python":
            _run_python(block, code, ns)
        elif block.lang == "console":
            _run_console(block, code, folder)
        else:
            _run_shell(block, code, folder)
    shutil.rmtree(folder, ignore_errors=True)
