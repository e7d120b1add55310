"""The package's import graph has no cycles, deferred imports included.

A function-level import hides a cycle from the interpreter but not from the
reader: the low module still reaches up into the one that imports it. This
test reads every module under ``src/ctxwindow`` with :mod:`ast`, follows every
``import`` that can run (module level, inside functions, inside ``try``) and
skips the ones under ``if TYPE_CHECKING:``, which never run. A module's
``__getattr__`` (PEP 562), which imports only when old code or a user asks for
a name, is the one exception: each keeps an old import path working
(``OLD_PATHS``) or imports a package's export on first use (``LAZY_EXPORTS``),
and must be listed there.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "ctxwindow"

Graph = dict[str, set[str]]

# Names that moved up to break a cycle can still be imported from their old module: its
# ``__getattr__`` imports the new home when old code asks for one. Each such hook is a
# cycle kept for compatibility; it goes (with its line here) once no importer uses the
# old path.
OLD_PATHS = {
    ("ctxwindow.eval.dataset", "ctxwindow.eval.loaders"),
    ("ctxwindow.tokens.chat", "ctxwindow.tokens.defaults"),
    ("ctxwindow.tokens.models", "ctxwindow.tokens.defaults"),
    ("ctxwindow.tokens.registry", "ctxwindow.tokens.defaults"),
}

# Names a public package exports (docs/api.md) but imports on first use, from its ``__getattr__``.
LAZY_EXPORTS = {
    # the store backends, so that ``import ctxwindow`` loads none it may never open
    ("ctxwindow.stores", "ctxwindow.stores.postgres"),
    ("ctxwindow.stores", "ctxwindow.stores.redis"),
    ("ctxwindow.stores", "ctxwindow.stores.tenants"),
    ("ctxwindow.stores", "ctxwindow.stores.tiered"),
}


def module_names() -> dict[str, Path]:
    """Map each dotted module name under the package to its source file."""
    names = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def is_type_checking(node: ast.If) -> bool:
    """Whether ``node`` is ``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    test = node.test
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def runnable_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Yield every import at or under ``node`` that can execute."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    if isinstance(node, ast.If) and is_type_checking(node):
        children: list[ast.AST] = list(node.orelse)
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        yield from runnable_imports(child)


def is_old_path_hook(statement: ast.stmt) -> bool:
    """Whether ``statement`` is a module's ``def __getattr__`` (PEP 562), which serves the
    old import path of names that moved to a module above."""
    return isinstance(statement, ast.FunctionDef) and statement.name == "__getattr__"


def base_of(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from … import`` names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, node.module] if node.module else anchor)


def targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]
) -> set[str]:
    """The package modules one import statement names: each imported submodule, else the
    module the names come from. Parent packages, which Python runs first, are left out: a
    package whose ``__init__`` gathers its submodules' names would be a cycle of each."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & known
    base = base_of(node, module, is_package)
    found = {f"{base}.{alias.name}" for alias in node.names} & known
    if len(found) < len(node.names) and base in known:
        found.add(base)
    return found


def import_graphs() -> tuple[Graph, Graph]:
    """Edges from each module to the package modules it imports; apart, the edges of the
    modules' ``__getattr__`` hooks (old import paths, run only when old code asks)."""
    paths = module_names()
    imports: Graph = {}
    hooks: Graph = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        imports[module], hooks[module] = edges_of(tree, module, is_package, set(paths))
    return imports, hooks


def edges_of(
    tree: ast.Module, module: str, is_package: bool, known: set[str]
) -> tuple[set[str], set[str]]:
    """The modules ``module`` imports, and apart those its ``__getattr__`` imports."""
    imports: set[str] = set()
    hooks: set[str] = set()
    for statement in tree.body:
        edges = hooks if is_old_path_hook(statement) else imports
        for node in runnable_imports(statement):
            edges |= targets(node, module, is_package, known)
    return imports - {module}, hooks - {module}


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle per strongly connected component larger than one module."""
    cycles = []
    for component in strongly_connected(graph):
        if len(component) > 1:
            cycles.append(cycle_within(graph, component))
    return sorted(cycles)


def strongly_connected(graph: Graph) -> list[set[str]]:
    """Tarjan's algorithm, iterative so deep graphs do not hit the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    components.append(pop_component(stack, on_stack, node))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def pop_component(stack: list[str], on_stack: set[str], root: str) -> set[str]:
    """Pop Tarjan's stack down to ``root``: one strongly connected component."""
    component = set()
    while True:
        node = stack.pop()
        on_stack.discard(node)
        component.add(node)
        if node == root:
            return component


def cycle_within(graph: Graph, component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def test_the_package_has_no_import_cycle() -> None:
    """No chain of imports, deferred or not, leads a module back to itself."""
    imports, _ = import_graphs()
    cycles = find_cycles(imports)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_old_import_paths_are_the_listed_ones() -> None:
    """The only imports the cycle check leaves out are the listed hooks (``OLD_PATHS``,
    ``LAZY_EXPORTS``): a new one must be listed, and one no longer there
    must leave its list."""
    _, hooks = import_graphs()
    found = {(module, target) for module, targets in hooks.items() for target in targets}
    assert found == OLD_PATHS | LAZY_EXPORTS


def test_lazy_exports_hide_no_cycle() -> None:
    """A package's exports imported on first use only defer an import: with their edges
    added, the graph still has no cycle."""
    imports, _ = import_graphs()
    for module, target in LAZY_EXPORTS:
        imports[module].add(target)
    assert find_cycles(imports) == []


def test_the_graph_follows_deferred_and_relative_imports() -> None:
    """Function-level and relative imports are edges; TYPE_CHECKING ones are not, and those
    of ``__getattr__`` are kept apart."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "from ..d import name\n"
        "if TYPE_CHECKING:\n"
        "    from pkg import c\n"
        "else:\n"
        "    import pkg.e\n"
        "def f():\n"
        "    from .. import g\n"
        "def __getattr__(name):\n"
        "    from pkg import h\n"
    )
    known = {"pkg", "pkg.sub", "pkg.sub.a", "pkg.sub.b", *(f"pkg.{m}" for m in "cdegh")}
    imports, hooks = edges_of(ast.parse(source), "pkg.sub.a", False, known)
    assert imports == {"pkg.sub.b", "pkg.d", "pkg.e", "pkg.g"}
    assert hooks == {"pkg.h"}


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c", "a"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b", "a"], ["c", "d", "c"]]),
    ],
)
def test_cycles_are_found_and_spelled_out(graph: Graph, expected: list[list[str]]) -> None:
    """Each cycle is reported once, as the path that closes it."""
    assert find_cycles(graph) == expected


MOVED = {
    "ctxwindow.tokens.chat": ("ctxwindow.tokens", ["chat_tokenizer", "count_tokens"]),
    "ctxwindow.tokens.models": ("ctxwindow.tokens", ["known_models", "model_info"]),
    "ctxwindow.tokens.registry": ("ctxwindow.tokens", ["default_models", "use_models"]),
    "ctxwindow.eval.dataset": ("ctxwindow.eval", ["load_dataset"]),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_import_path_still_works_and_warns(old: str) -> None:
    """Each name that moved up to open a cycle is still importable from its old module for
    one release, with a DeprecationWarning naming its public home (CHANGELOG)."""
    new, names = MOVED[old]
    assert any(module == old for module, _ in OLD_PATHS)
    for name in names:
        with pytest.warns(DeprecationWarning, match=rf"^{old}\.{name} has moved: .* {new} \("):
            value = getattr(importlib.import_module(old), name)
        assert value is getattr(importlib.import_module(new), name)


def test_an_internal_name_that_moved_points_to_its_module() -> None:
    with pytest.warns(DeprecationWarning, match=r"from ctxwindow\.tokens\.defaults \("):
        value = importlib.import_module("ctxwindow.tokens.registry").models_from_env
    assert value is importlib.import_module("ctxwindow.tokens.defaults").models_from_env
