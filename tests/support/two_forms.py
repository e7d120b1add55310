"""A mixin for fake embedders: an asymmetric model (as E5), whose searched texts and
questions are embedded by methods of their own, each call noted in ``forms``."""

from __future__ import annotations

from typing import Any


class TwoForms:
    """Mix in before a fake embedder that has ``_vector(text)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forms: list[tuple[str, list[str]]] = []

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        self.forms.append(("passage", list(texts)))
        return [self._vector(text) for text in texts]  # type: ignore[attr-defined]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.forms.append(("query", list(texts)))
        return [self._vector(text) for text in texts]  # type: ignore[attr-defined]
