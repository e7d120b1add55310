"""Exact counts for open models through Hugging Face ``tokenizers``, offline.

``HuggingFaceCounter`` loads a local ``tokenizer.json`` (nothing is ever
downloaded). ``hf_chat_tokenizer`` adds the chat framing, measured by
rendering the model's own chat template on probe conversations::

    chat = hf_chat_tokenizer("models/Qwen2.5-7B-Instruct")
    chat.count([{"role": "user", "content": "你好"}])

How the framing is measured, and where counts are exact, is told in
:mod:`ctxwindow.tokens.templates`; here the model's files are found and
read: ``tokenizer.json``, the chat template and ``tokenizer_config.json``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwindow.errors import EncodingDataError
from ctxwindow.extras import install_hint
from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer
from ctxwindow.tokens.counter import EstimateWarning
from ctxwindow.tokens.templates import ContentLayout as ContentLayout  # their former home
from ctxwindow.tokens.templates import Renderer, Unprobeable, compile_template, measure
from ctxwindow.tokens.templates import TemplateChatTokenizer as TemplateChatTokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

INSTALL_HINT = install_hint("hf")

DEFAULT_FRAMING = ChatFraming(per_message=4, per_name=1, reply_priming=3)
"""Framing for a model without a usable chat template: conservative defaults, not exact."""

_TOKENIZER_FILE = "tokenizer.json"
_CONFIG_FILE = "tokenizer_config.json"
_TEMPLATE_FILE = "chat_template.jinja"
_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")


class HuggingFaceCounter:
    """A Hugging Face ``tokenizers`` tokenizer as a ``TokenCounter`` (exact, offline).

    Counting never adds special tokens (no BOS/EOS from the post-processor)
    and ignores any truncation or padding saved in ``tokenizer.json``. Added
    tokens written in the text, such as ``<|im_start|>``, count as one token
    each: that is how a rendered chat template is tokenized. ``decode`` keeps
    special tokens, so ``decode(encode(text)) == text`` for byte-level
    tokenizers without a normalizer. ``HuggingFaceCounter(tokenizer, name)``
    wraps a ``tokenizers.Tokenizer`` already in memory (switching off its
    truncation and padding)::

        counter = HuggingFaceCounter.from_folder("models/Qwen2.5-7B-Instruct")
        counter.count("中文和日本語")
    """

    exact = True

    def __init__(self, tokenizer: Tokenizer, name: str) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.name = name
        self._tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: str | Path, *, name: str | None = None) -> HuggingFaceCounter:
        """Load a ``tokenizer.json``; ``name`` defaults to its folder's name.

        Raises ``EncodingDataError`` naming the path if the file is missing or
        not a tokenizer, and ``ImportError`` if ``tokenizers`` is not installed.
        """
        path = Path(path)
        tokenizer = _load_tokenizer(path)
        return cls(tokenizer, name or path.resolve().parent.name or path.stem)

    @classmethod
    def from_folder(cls, path: str | Path, *, name: str | None = None) -> HuggingFaceCounter:
        """Load ``tokenizer.json`` from a local model folder; ``name`` defaults to the folder's."""
        folder = Path(path)
        if not folder.is_dir():
            raise EncodingDataError(f"no model folder at {folder}")
        return cls.from_file(folder / _TOKENIZER_FILE, name=name or folder.resolve().name)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without BOS/EOS."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens included."""
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def count(self, text: str) -> int:
        """Number of tokens of ``text``, without BOS/EOS."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def added_tokens(self) -> list[str]:
        """The added tokens (``<|im_start|>``...): texts always tokenized alone, as one token."""
        return [token.content for token in self._tokenizer.get_added_tokens_decoder().values()]


def hf_chat_tokenizer(path: str | Path, *, name: str | None = None) -> ChatTokenizer:
    """A ``ChatTokenizer`` for an open model: a ``tokenizer.json`` or its folder.

    The chat template comes from ``chat_template.jinja`` or the
    ``chat_template`` of ``tokenizer_config.json`` in the same folder (for a
    list of templates, the one named ``"default"``). With a template, the
    result is a ``TemplateChatTokenizer`` whose framing was measured by
    rendering it (see the module docstring); without one, a ``ChatTokenizer``
    with ``DEFAULT_FRAMING``. If the template cannot be rendered on the probe
    conversations, it warns (``EstimateWarning``) and uses ``DEFAULT_FRAMING``.
    """
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    tokenizer_file = folder / _TOKENIZER_FILE if path.is_dir() else path
    counter = HuggingFaceCounter.from_file(tokenizer_file, name=name or folder.resolve().name)
    config = _read_config(folder)
    try:
        template = _chat_template(folder, config)
        if template is None:
            return ChatTokenizer(counter, DEFAULT_FRAMING, model=counter.name)
        return measure(Renderer(compile_template(template), _template_context(config), counter))
    except Unprobeable as exc:
        warnings.warn(
            f"the chat template of {counter.name!r} cannot be probed ({exc}); counting with "
            "default framing (per_message=4, reply_priming=3, per_name=1), not exact",
            EstimateWarning,
            stacklevel=2,
        )
        return ChatTokenizer(counter, DEFAULT_FRAMING, model=counter.name)


# -- loading ----------------------------------------------------------------------


def _tokenizer_class() -> type[Tokenizer]:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError(f"the Hugging Face backend needs 'tokenizers': {INSTALL_HINT}") from exc
    return Tokenizer


def _load_tokenizer(path: Path) -> Tokenizer:
    tokenizer_class = _tokenizer_class()
    data = _read_text(path, "tokenizer file")
    try:
        return tokenizer_class.from_str(data)
    except Exception as exc:  # tokenizers raises a bare Exception for a bad file
        raise EncodingDataError(f"{path} is not a tokenizers tokenizer.json: {exc}") from exc


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EncodingDataError(f"cannot read the {what} {path}: {exc}") from exc


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / _CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        config = json.loads(_read_text(path, "tokenizer config"))
    except ValueError as exc:
        raise EncodingDataError(f"the tokenizer config {path} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise EncodingDataError(f"the tokenizer config {path} is not a JSON object")
    return config


def _chat_template(folder: Path, config: Mapping[str, Any]) -> str | None:
    """The template source, or ``None`` if the model has none."""
    template_file = folder / _TEMPLATE_FILE
    if template_file.is_file():
        return _read_text(template_file, "chat template")
    template = config.get("chat_template")
    if template is None or isinstance(template, str):
        return template
    if isinstance(template, list):
        for entry in template:
            if isinstance(entry, Mapping) and entry.get("name") == "default":
                return str(entry["template"])
        raise Unprobeable("it lists several templates but none named 'default'")
    raise Unprobeable(f"chat_template is a {type(template).__name__}, not text")


def _template_context(config: Mapping[str, Any]) -> dict[str, str]:
    """The special tokens templates refer to (``bos_token``...), as text."""
    context = {}
    for key in _SPECIAL_TOKENS:
        value = config.get(key)
        if isinstance(value, Mapping):
            value = value.get("content")
        if isinstance(value, str):
            context[key] = value
    return context
