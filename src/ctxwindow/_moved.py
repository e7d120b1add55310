"""Names that moved to another module: the old import path warns for one release."""

from __future__ import annotations

import warnings


def warn_moved(old: str, name: str, new: str) -> None:
    """Warn (``DeprecationWarning``, at the importer's line) that ``old.name`` is now
    ``new.name``."""
    warnings.warn(
        f"{old}.{name} has moved: import it from {new} (the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
