"""OpenAI's BPE encodings, loaded offline from files inside this package.

tiktoken fetches its encoding files over the network on first use. That fails
on air-gapped machines, so ctxwindow ships the same files (gzip-compressed,
2.4 MB, in ``ctxwindow/tokens/data``) and checks the SHA-256 of the
decompressed bytes against the hash tiktoken itself pins. The result is a real
``tiktoken.Encoding``: identical ids, tiktoken's Rust core.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources

import tiktoken

from ctxwindow.errors import EncodingDataError

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"

_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True)
class EncodingSpec:
    """Everything needed to build one encoding without the network."""

    name: str
    sha256: str  # of the decompressed ``.tiktoken`` file, as pinned by tiktoken
    pattern: str
    special_tokens: dict[str, int]

    @property
    def resource(self) -> str:
        return f"{self.name}.tiktoken.gz"


SPECS = {
    "cl100k_base": EncodingSpec(
        name="cl100k_base",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pattern=_CL100K_PATTERN,
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": EncodingSpec(
        name="o200k_base",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pattern=_O200K_PATTERN,
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}

_cache: dict[str, tiktoken.Encoding] = {}
_lock = threading.Lock()


def get_encoding(name: str) -> tiktoken.Encoding:
    """Return the named encoding, built once per process from packaged, verified files."""
    with _lock:
        if name not in _cache:
            _cache[name] = _build(name)
        return _cache[name]


def read_ranks(spec: EncodingSpec, data: bytes | None = None) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file (base64 token, rank per line) after checking its hash."""
    raw = _read_packaged(spec) if data is None else data
    digest = hashlib.sha256(raw).hexdigest()
    if digest != spec.sha256:
        raise EncodingDataError(
            f"{spec.name}: SHA-256 of the encoding file is {digest}, expected {spec.sha256}; "
            "reinstall ctxwindow"
        )
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _build(name: str) -> tiktoken.Encoding:
    spec = SPECS.get(name)
    if spec is None:
        raise EncodingDataError(f"no packaged encoding {name!r}; known: {sorted(SPECS)}")
    return tiktoken.Encoding(
        name=spec.name,
        pat_str=spec.pattern,
        mergeable_ranks=read_ranks(spec),
        special_tokens=spec.special_tokens,
    )


def _read_packaged(spec: EncodingSpec) -> bytes:
    try:
        packed = (resources.files("ctxwindow.tokens") / "data" / spec.resource).read_bytes()
        return gzip.decompress(packed)
    except (OSError, EOFError) as exc:
        raise EncodingDataError(
            f"cannot read {spec.resource} from ctxwindow's package data ({exc}); "
            "reinstall ctxwindow"
        ) from exc
