"""Reading a configuration file (TOML or JSON) so that every problem names the file.

The model config (``--model-config``, ``CTXWINDOW_MODEL_CONFIG``) and the
service's settings file (``ctxwindow serve --config``) are both read here: a
missing or unreadable file, text that is not UTF-8, an empty JSON file, bad
syntax (with its line and column) and a file that is not one table all give
one line, ``<file>: <what is wrong>``.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "settings.json"
>>> _ = path.write_text('{"port": 80 "host": "::1"}')
>>> try:
...     read_table(path, "settings")
... except ValueError as exc:
...     print(str(exc).replace(str(path), "settings.json"))
settings.json: not valid JSON at line 1, column 13: Expecting ',' delimiter
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def read_table(
    path: Path, what: str = "config", error: type[ValueError] = ValueError
) -> dict[str, Any]:
    """The table a TOML (``.toml``) or JSON (any other suffix) file holds.

    ``what`` names the file's kind in the message of a file that holds no
    table; ``error`` is the ``ValueError`` subclass raised, its text starting
    with the path.
    """
    text = _text(path, error)
    loaded = _toml(path, text, error) if path.suffix == ".toml" else _json(path, text, error)
    if not isinstance(loaded, dict):
        raise error(f"{path}: a {what} file holds one table of settings, not {_kind(loaded)}")
    return loaded


def _text(path: Path, error: type[ValueError]) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the file: {exc.strerror or exc}") from None


def _json(path: Path, text: str, error: type[ValueError]) -> Any:
    if not text.strip():
        raise error(f"{path}: the file is empty (a JSON config holds one object)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None


def _toml(path: Path, text: str, error: type[ValueError]) -> Any:
    toml = _toml_reader()
    try:
        return toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


def _toml_reader() -> ModuleType:
    """The standard library's ``tomllib`` (3.11+); on 3.10 ``tomli``, the package it came
    from (same API), which the core install requires there."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli

    return tomli


def _kind(value: Any) -> str:
    """A JSON value's kind in JSON's words (an array, a string...)."""
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


__all__ = ["read_table"]
