"""The flat public namespace is complete and sorted."""

from __future__ import annotations

import ctxwindow


def test_all_is_sorted_and_unique() -> None:
    assert ctxwindow.__all__ == sorted(set(ctxwindow.__all__))


def test_every_public_name_is_exported() -> None:
    public = {
        name
        for name, value in vars(ctxwindow).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("ctxwindow")
    }
    assert public <= set(ctxwindow.__all__)
    assert all(hasattr(ctxwindow, name) for name in ctxwindow.__all__)
