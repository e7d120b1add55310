"""ctxwindow's redaction detectors against detect-secrets, on the labelled corpus, side by side.

For every secret of the kinds detect-secrets covers (API keys, passwords,
private keys, cloud keys, URL secrets, settings named as secrets) the line
counts as found when a detected span overlaps it; a negative line (no
labelled entity) counts as flagged when anything is detected in it. ctxwindow
runs its default ``Redactor``; detect-secrets runs as its own scanner does:
each text written to a file and scanned with every plugin and its default
filters (``SecretsCollection.scan_file``). Its ad-hoc string scan
(``scan_line``) is not used: it searches eagerly and flags most words.

detect-secrets is not a dependency of ctxwindow: ``pip install
detect-secrets`` first (the script says so and measures ctxwindow alone
without it). Nothing here asserts a number. ~5 s.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ctxwindow.redact import Redactor, resolve

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "redaction_corpus.jsonl"
COVERED = {"API_KEY", "PASSWORD", "PRIVATE_KEY", "CLOUD_KEY", "URL_SECRET", "SECRET"}


def ours(text: str, redactor: Redactor) -> list[tuple[int, int]]:
    found = [(span, i) for i, d in enumerate(redactor.detectors) for span in d.find(text)]
    return [span for span, _ in resolve(found)]


def theirs(text: str) -> list[tuple[int, int]] | None:
    """detect-secrets' findings as spans of ``text`` (each value's occurrences); None if it
    is not installed."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as folder, default_settings():
        path = os.path.join(folder, "message.txt")
        Path(path).write_text(text + "\n", encoding="utf-8")
        collection = SecretsCollection()
        collection.scan_file(path)
        values = [secret.secret_value for _, secret in collection if secret.secret_value]
    spans = []
    for value in values:
        at = text.find(value)
        while at >= 0:
            spans.append((at, at + len(value)))
            at = text.find(value, at + 1)
    return spans


def score(rows: list[dict[str, Any]], spans: list[list[tuple[int, int]]]) -> tuple[int, int, int]:
    """(secrets found, secrets, negative lines flagged)."""
    found = total = flagged = 0
    for row, detected in zip(rows, spans, strict=True):
        for entity in row["entities"]:
            if entity["type"] in COVERED:
                total += 1
                found += any(s < entity["end"] and entity["start"] < e for s, e in detected)
        if not row["entities"] and detected:
            flagged += 1
    return found, total, flagged


def main() -> None:
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    negatives = sum(not row["entities"] for row in rows)
    redactor = Redactor()
    results = {"ctxwindow": [ours(row["text"], redactor) for row in rows]}
    scanned = [theirs(row["text"]) for row in rows]
    if all(s is not None for s in scanned):
        results["detect-secrets"] = [s or [] for s in scanned]
    else:
        print("detect-secrets is not installed (pip install detect-secrets): ctxwindow alone\n")
    print(f"{len(rows)} lines, {negatives} negative")
    print(f"{'':<16} {'secrets found':>18} {'negatives flagged':>18}")
    for name, spans in results.items():
        found, total, flagged = score(rows, spans)
        print(f"{name:<16} {f'{found}/{total} ({found / total:.3f})':>18} {flagged:>18}")
    if "detect-secrets" in results:
        mine, theirs_ = results["ctxwindow"], results["detect-secrets"]
        only = [
            (row["id"], e["value"][:40])
            for row, a, b in zip(rows, mine, theirs_, strict=True)
            for e in row["entities"]
            if e["type"] in COVERED
            and any(s < e["end"] and e["start"] < t for s, t in b)
            and not any(s < e["end"] and e["start"] < t for s, t in a)
        ]
        print(f"\nfound by detect-secrets only: {only}")


if __name__ == "__main__":
    sys.exit(main())
