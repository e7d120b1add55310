"""Billing of image parts, by OpenAI's published formulas.

Tile-billed models (gpt-4o, gpt-4.1, gpt-4-turbo, o1/o3, gpt-5): ``detail:
low`` costs the base; ``high`` (and ``auto``, counted as ``high`` so budgets
err on the safe side) scales the image to fit 2048x2048, then so its shortest
side is at most 768px, and pays ``base + tile * number_of_512px_tiles``.

Patch-billed models (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/nano): the image
is covered by 32px patches, capped at 1,536 patches by scaling down, and the
patch count is multiplied by the model's multiplier.

The size comes from ``width``/``height`` on the part or its ``image_url``, or
is read from the header of a base64 ``data:`` URL (PNG, GIF, JPEG, WebP).
Otherwise ``DEFAULT_IMAGE_SIZE`` (1024x1024) is assumed.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Mapping
from typing import Any

from ctxwindow.tokens.models import ImagePricing

DEFAULT_IMAGE_SIZE = (1024, 1024)
MAX_PATCHES = 1536
_HEADER_BYTES = 256 * 1024


def image_tokens(part: Mapping[str, Any], pricing: ImagePricing) -> int:
    """Prompt tokens billed for one ``image_url`` content part."""
    image = part["image_url"]
    width, height = image_size(part)
    if pricing.patch_multiplier is not None:
        return math.ceil(patch_count(width, height) * pricing.patch_multiplier)
    if image.get("detail", "auto") == "low":
        return pricing.base
    return pricing.base + pricing.tile * tile_count(width, height)


def tile_count(width: int, height: int) -> int:
    """512px tiles after fitting in 2048x2048 and shrinking the short side to 768."""
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    return math.ceil(w / 512) * math.ceil(h / 512)


def patch_count(width: int, height: int) -> int:
    """32px patches, capped at ``MAX_PATCHES`` by scaling the image down."""
    patches = math.ceil(width / 32) * math.ceil(height / 32)
    if patches <= MAX_PATCHES:
        return patches
    ratio = math.sqrt(32 * 32 * MAX_PATCHES / (width * height))
    cols, rows = width * ratio / 32, height * ratio / 32
    ratio *= min(math.floor(cols) / cols, math.floor(rows) / rows)
    cols, rows = width * ratio / 32, height * ratio / 32
    return min(MAX_PATCHES, math.ceil(cols - 1e-9) * math.ceil(rows - 1e-9))


def image_size(part: Mapping[str, Any]) -> tuple[int, int]:
    """Width and height of an image part: given, read from a data URL, or the default."""
    image = part["image_url"]
    for source in (image, part):
        width, height = source.get("width"), source.get("height")
        if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
            return width, height
    url = image.get("url", "")
    if url.startswith("data:") and ";base64," in url:
        sniffed = _sniff_size(_decode_head(url.split(";base64,", 1)[1]))
        if sniffed is not None:
            return sniffed
    return DEFAULT_IMAGE_SIZE


def _decode_head(b64: str) -> bytes:
    head = b64[: _HEADER_BYTES // 3 * 4]
    try:
        return base64.b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return b""


def _sniff_size(data: bytes) -> tuple[int, int] | None:
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            width, height = struct.unpack(">II", data[16:24])
            return int(width), int(height)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", data[6:10])
            return int(width), int(height)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(width), int(height)
        i += 2 + length
    return None
