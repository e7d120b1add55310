"""Loading evaluation datasets, and the public long-conversation benchmarks LoCoMo,
LongMemEval and BEAM as evaluation datasets.

``load_dataset`` reads a ``.json``/``.jsonl`` file, a built-in dataset
(``builtin:NAME``) or a benchmark: ``load_dataset("locomo:PATH")``,
``load_dataset("longmemeval:PATH")`` and ``load_dataset("beam:PATH")``
(``load_benchmark``). The original files are turned into
the dataset format of docs/eval.md (conversations of messages with ``id``
and ``timestamp``, and their questions), which ``parse_dataset`` then
validates like any JSON dataset. The rendering is specified in docs/eval.md,
"Public benchmarks"; reference figures and recall code depend on it, so it
changes only on purpose. Each format has its module (``locomo``,
``longmemeval``, ``beam``); what they share is in ``conversion``.

What can be wrong, and what happens::

    the file (BEAM: the folder) cannot be read, or is not the  -> DatasetError
      benchmark's shape
    a sample / instance / chat is malformed (a key missing, a  -> a problem naming it and
      wrong type; BEAM: a chat's file missing or not JSON)        the key; DatasetError
                                                                  unless skip_invalid
    a question the benchmark itself leaves unmeasurable (no    -> always left out,
      evidence, evidence naming turns that do not exist)          with a note
    an unanswerable question (LoCoMo category 5,               -> left out, counted in one
      LongMemEval ``_abs``)                                       note, unless
                                                                  include_unanswerable
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxwindow.eval.beam import beam_chats, from_beam
from ctxwindow.eval.conversion import Conversion, Malformed
from ctxwindow.eval.dataset import Dataset, DatasetError, parse_dataset, read_json
from ctxwindow.eval.locomo import from_locomo
from ctxwindow.eval.longmemeval import from_longmemeval

__all__ = [
    "BENCHMARKS",
    "Conversion",
    "benchmarks",
    "from_beam",
    "from_locomo",
    "from_longmemeval",
    "load_benchmark",
    "load_dataset",
]


def load_dataset(
    spec: str, *, skip_invalid: bool = False, include_unanswerable: bool = False
) -> tuple[Dataset, list[str]]:
    """Load ``builtin:NAME``, ``locomo:PATH``, ``longmemeval:PATH``, ``beam:PATH`` or a
    ``.json``/``.jsonl`` file.

    Returns the dataset and the problems of what was left out: by ``skip_invalid``,
    and, for a benchmark, its questions that cannot be measured.
    ``include_unanswerable`` keeps a benchmark's unanswerable questions
    (LoCoMo's adversarial ones, LongMemEval's abstention ones).
    """
    if spec.startswith(BENCHMARKS):
        return load_benchmark(
            spec, skip_invalid=skip_invalid, include_unanswerable=include_unanswerable
        )
    if spec.startswith("builtin:"):
        from ctxwindow.eval.builtin import builtin_dataset  # the generators load when asked

        try:
            data = builtin_dataset(spec.removeprefix("builtin:"))
        except ValueError as exc:
            raise DatasetError(spec, [str(exc)]) from exc
        return parse_dataset(data, spec, skip_invalid=skip_invalid)
    return parse_dataset(read_json(Path(spec)), spec, skip_invalid=skip_invalid)


def load_benchmark(
    spec: str, *, skip_invalid: bool = False, include_unanswerable: bool = False
) -> tuple[Dataset, list[str]]:
    """Load ``locomo:PATH``, ``longmemeval:PATH`` or ``beam:PATH``; returns the dataset and what
    was left out."""
    kind, _, path = spec.partition(":")
    convert = _CONVERTERS[kind]
    read = _INPUTS.get(kind, read_json)
    try:
        conversion = convert(read(Path(path)), include_unanswerable=include_unanswerable)
    except Malformed as exc:
        raise DatasetError(spec, [str(exc)]) from exc
    if conversion.problems and not skip_invalid:
        raise DatasetError(spec, conversion.problems)
    data = {"conversations": conversion.conversations}
    dataset, invalid = parse_dataset(data, spec, skip_invalid=skip_invalid)
    return dataset, [*conversion.notes, *conversion.problems, *invalid]


_CONVERTERS: dict[str, Callable[..., Conversion]] = {
    "locomo": from_locomo,
    "longmemeval": from_longmemeval,
    "beam": from_beam,
}
# The spec prefixes ``load_dataset`` hands to ``load_benchmark``.
BENCHMARKS = tuple(f"{kind}:" for kind in _CONVERTERS)
# What a converter is given: the parsed file, but BEAM's chats, as a chat is a folder of files.
_INPUTS: dict[str, Callable[[Path], Any]] = {"beam": beam_chats}


def benchmarks() -> dict[str, Callable[..., Conversion]]:
    """The benchmarks ``load_benchmark`` reads, by spec prefix (``locomo`` for ``locomo:PATH``)."""
    return dict(_CONVERTERS)
