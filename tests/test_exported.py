"""The public API is named, complete, and the only one the docs use (docs/api.md).

The public modules are ``ctxwindow._public.MODULES``; every other module is
internal. Each public module's ``__all__`` is sorted as ruff sorts it (RUF022),
unique, importable and complete: every public name the module defines, and for
a package every name it imports from ctxwindow. docs/api.md lists the same
modules and, under each, its ``__all__``. Every import of ctxwindow in the
README, docs/ and examples/ names a public module and only names in its
``__all__``.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ctxwindow._public import MODULES

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
API_PAGE = ROOT / "docs" / "api.md"
READERS_FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").rglob("*.py")),
]

# ``from ctxwindow… import NAMES`` (one line, or in parentheses) and ``import ctxwindow…``,
# wherever they stand in a page: a code block, a doctest, a line of prose.
FROM_IMPORT = re.compile(r"\bfrom\s+(ctxwindow(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#`;]*)")
PLAIN_IMPORT = re.compile(r"(?<!\w)import\s+(ctxwindow(?:\.\w+)*)")


def source_of(module: str) -> Path:
    """The file of a module of the package, found without importing it."""
    path = SRC.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def static_all(module: str) -> list[str]:
    """A module's ``__all__`` as its source spells it (no extra needed to read it)."""
    for statement in ast.parse(source_of(module).read_text("utf-8")).body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in statement.targets
        ):
            names: list[str] = ast.literal_eval(statement.value)
            return names
    raise AssertionError(f"{module} has no __all__")


def ruff_order(name: str) -> tuple[int, list[str | int]]:
    """RUF022's isort-style order: CONSTANTS, then Classes, then the rest, each naturally."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def bound_names(module: str) -> set[str]:
    """The public names a module's source binds at its top level (``TYPE_CHECKING`` blocks
    included: what a package imports on first use): what it defines, and for a package
    what it imports from ctxwindow, which it re-exports."""
    path = source_of(module)
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    pending = list(ast.parse(path.read_text("utf-8")).body)
    while pending:
        statement = pending.pop()
        if isinstance(statement, ast.If | ast.Try):
            pending += [*statement.body, *statement.orelse]
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
        elif (
            is_package
            and isinstance(statement, ast.ImportFrom)
            and (statement.level or is_ours(statement.module or ""))
        ):
            names |= {alias.asname or alias.name for alias in statement.names}
    return {name for name in names if not name.startswith("_")}


def imports_in(path: Path) -> list[tuple[int, str, list[str]]]:
    """Each import of ctxwindow in a page or an example: (line, module, names taken);
    ``import ctxwindow.x`` takes no names."""
    text = path.read_text("utf-8")
    if path.suffix == ".py":
        return python_imports(text)
    found = []
    for match in FROM_IMPORT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, match[1], imported_names(match[2])))
    for match in PLAIN_IMPORT.finditer(text):
        found.append((text.count("\n", 0, match.start()) + 1, match[1], []))
    return sorted(found)


def python_imports(text: str) -> list[tuple[int, str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and is_ours(node.module or ""):
            found.append((node.lineno, node.module or "", [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if is_ours(a.name)]
    return sorted(found)


def is_ours(module: str) -> bool:
    return module == "ctxwindow" or module.startswith("ctxwindow.")


def imported_names(clause: str) -> list[str]:
    """``A, B as C`` or ``(A,\\n B,  # why\\n)`` -> ``["A", "B"]``."""
    clause = re.sub(r"#[^\n]*", "", clause).strip().strip("()")
    names = (re.sub(r"^(?:>>>|\.\.\.)\s*", "", part.strip()) for part in clause.split(","))
    return [name.split()[0] for name in names if name]


def api_page_table() -> list[str]:
    """The modules of the table under "## The modules" in docs/api.md, in order."""
    return re.findall(r"^\| `(ctxwindow[\w.]*)` \|", API_PAGE.read_text("utf-8"), re.M)


def api_page_names() -> dict[str, list[str]]:
    """Each ``### `module``` section of docs/api.md -> the names it lists, in order."""
    sections = re.split(r"^### `(ctxwindow[\w.]*)`$", API_PAGE.read_text("utf-8"), flags=re.M)
    return {
        module: re.findall(r"`(\w+)`", body)
        for module, body in zip(sections[1::2], sections[2::2], strict=True)
    }


def names_paragraph(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def test_the_api_page_lists_the_public_modules() -> None:
    """docs/api.md's table and its name sections are ``_public.MODULES``, in its order."""
    assert api_page_table() == list(MODULES)
    assert list(api_page_names()) == list(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_the_api_page_lists_each_modules_all(module: str) -> None:
    """Under each module, docs/api.md names its ``__all__``, in order; the failure gives the
    paragraph to paste."""
    names = static_all(module)
    assert api_page_names().get(module) == names, (
        f"docs/api.md, under ### `{module}`, should list:\n{names_paragraph(names)}"
    )


@pytest.mark.parametrize("module", MODULES)
def test_all_is_sorted_and_unique(module: str) -> None:
    """Each ``__all__`` names a name once, in the order ruff keeps it."""
    names = static_all(module)
    assert names == sorted(set(names), key=ruff_order)


@pytest.mark.parametrize("module", MODULES)
def test_every_name_in_all_is_importable(module: str) -> None:
    """``from MODULE import NAME`` works for each name, those imported on first use too."""
    imported = importlib.import_module(module)
    assert imported.__all__ == static_all(module)
    missing = [name for name in imported.__all__ if not hasattr(imported, name)]
    assert not missing
    star: dict[str, object] = {}
    exec(f"from {module} import *", star)
    assert set(star) - {"__builtins__"} == set(imported.__all__)


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_in_all(module: str) -> None:
    """A public module hides nothing public from its ``__all__``: what its source binds, and
    the objects of ctxwindow it holds (defined in it, or, for a package, anywhere)."""
    imported = importlib.import_module(module)
    is_package = hasattr(imported, "__path__")
    held = {
        name
        for name, value in vars(imported).items()
        if name.isidentifier()
        and not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and (
            getattr(value, "__module__", "").startswith("ctxwindow")
            if is_package
            else getattr(value, "__module__", "") == module
        )
    }
    hidden = sorted((bound_names(module) | held) - set(imported.__all__))
    assert not hidden, (
        f"{module} has public names outside its __all__: {', '.join(hidden)}; list them"
        " (and in docs/api.md), or, for a helper the module only uses, import it as _name"
    )


def test_the_everyday_names_are_where_users_look() -> None:
    """Issue 27, item 4: the stores, the archives, ``hybrid_policy`` and the window's value
    objects are exported from the packages users look in."""
    assert {"hybrid_policy", "Keeping", "Folding"} <= set(static_all("ctxwindow"))
    assert {"Keeping", "Folding"} <= set(static_all("ctxwindow.policies"))
    assert "hybrid_policy" in static_all("ctxwindow.context")
    assert "CoreSettings" in static_all("ctxwindow.context")
    stores = {
        f"{flavour}{kind}Store"
        for flavour in ("", "Async")
        for kind in ("Memory", "SQLite", "Redis", "Postgres", "Tiered")
    }
    assert stores | {"Store", "AsyncStore", "open_store", "open_async_store"} <= set(
        static_all("ctxwindow.stores")
    )
    archive = {"SQLiteArchive", "PostgresArchive", "E5SmallEmbedder", "MiniLMEmbedder"}
    assert archive | {"default_embedder"} <= set(static_all("ctxwindow.archive"))


def test_importing_ctxwindow_loads_no_store_backend() -> None:
    """The backends ``ctxwindow.stores`` exports are imported on first use, so
    ``import ctxwindow`` stays as fast as it was and needs none of their drivers."""
    lazy = ["ctxwindow.stores.redis", "ctxwindow.stores.postgres", "ctxwindow.stores.tiered"]
    code = (
        "import sys, ctxwindow\n"
        f"print([m for m in {[*lazy, 'ctxwindow.stores.tenants', 'redis', 'psycopg']!r}"
        " if m in sys.modules])\n"
        "from ctxwindow.stores import RedisStore, AsyncPostgresStore, TieredStore\n"
        f"print([m for m in {lazy!r} if m not in sys.modules])\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.splitlines() == ["[]", "[]"]


@pytest.mark.parametrize("path", READERS_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_readers_import_only_the_public_api(path: Path) -> None:
    """What the README, a docs page or an example imports from ctxwindow is public."""
    wrong = []
    for line, module, names in imports_in(path):
        if module not in MODULES:
            wrong.append(f"line {line}: {module} is internal")
        elif unknown := [name for name in names if name != "*" and name not in static_all(module)]:
            wrong.append(f"line {line}: {module} does not export {', '.join(unknown)}")
    assert not wrong, f"{path.relative_to(ROOT)} (see docs/api.md):\n" + "\n".join(wrong)


def test_the_readers_imports_are_found() -> None:
    """The scan sees every form a page uses: a line, a doctest, parentheses, aliases,
    comments, prose; and it sees the README's imports."""
    page = (
        "from ctxwindow import TokenWindow, count_tokens  # comment\n"
        ">>> from ctxwindow.stores import (\n"
        "...     RedisStore,  # why\n"
        "...     TieredStore as Tiered,\n"
        "... )\n"
        "Write `from ctxwindow.context.core import Core` and `import ctxwindow.eval`.\n"
    )
    found = [
        (m[1], imported_names(m[2]), page.count("\n", 0, m.start()) + 1)
        for m in FROM_IMPORT.finditer(page)
    ]
    assert found == [
        ("ctxwindow", ["TokenWindow", "count_tokens"], 1),
        ("ctxwindow.stores", ["RedisStore", "TieredStore"], 2),
        ("ctxwindow.context.core", ["Core"], 6),
    ]
    assert [m[1] for m in PLAIN_IMPORT.finditer(page)] == ["ctxwindow.eval"]
    readme = {module for _, module, _ in imports_in(ROOT / "README.md")}
    assert {"ctxwindow", "ctxwindow.archive"} <= readme
