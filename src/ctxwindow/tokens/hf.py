"""Exact counts for open models through Hugging Face ``tokenizers``, offline.

``HuggingFaceCounter`` loads a local ``tokenizer.json`` (nothing is ever
downloaded). ``hf_chat_tokenizer`` adds the chat framing, measured by
rendering the model's own chat template on probe conversations::

    chat = hf_chat_tokenizer("models/Qwen2.5-7B-Instruct")
    chat.count([{"role": "user", "content": "你好"}])

How the framing is measured (``T`` = tokens of the rendered text, with added
tokens such as ``<|im_start|>`` counted as one token each; ``x`` = the probe
content; ``u``, ``a``, ``s`` = one user, assistant, system message):

- overhead of role r = what appending one r message adds, minus ``T(x)``:
  user from ``[u, a] -> [u, a, u]``, assistant from ``[u] -> [u, a]``,
  system from ``[u] -> [s, u]``. ``ChatTokenizer`` counts the role name as
  text, so each role's per-message value is its overhead minus ``T(role)``;
  the user's is ``framing.per_message``, used for every role not probed;
- reply priming = the generation prompt plus whatever the template emits once
  per conversation (BOS, a default system prompt), so messages plus priming
  add up to the full rendering with ``add_generation_prompt=True``;
- names: if a probe ``name`` changes nothing, the template drops names and
  they count 0; otherwise ``per_name`` is what the name adds minus its text;
- content (``ContentLayout``, per role): if ``" \n\tx"`` (``"x \n\t"``)
  renders as ``x``, the template trims that end and content is counted
  trimmed. Then a set of edge contents (empty, whitespace, leading newlines
  and spaces...) is rendered; if counting them alone misses any, content is
  counted inside the text around it up to the nearest added token on each
  side (``<|im_start|>user\n`` ... ``<|im_end|>``), minus what that text
  adds around ``x``: a newline starting the content can merge with the one
  before it, and tokenization never crosses an added token.

Limits: counts are exact for templates that frame every message the same way
whatever its neighbours, with any text content: ChatML (Qwen) and Llama 3.1,
whose system block with the date lines is emitted even without a system
message (it lands in the reply priming; a system message costs what its
trimmed text adds inside it) and whose ``| trim`` is measured, not assumed.
A list of parts is counted part by part, trimmed at the ends of the whole.
Where a template moves content elsewhere, counts can be a few tokens off:
Llama 2 glues the system message into the first user turn (without one it
is exact), and Llama 3.1 counts a later system message like the first, a
header short. Roles other than system/user/assistant (tool, developer) get
the user framing and their content is counted as it is, though Llama 3.1
renders a tool result as JSON; ``tool_call_id`` is counted as text even
where a template drops it. A template that injects a default system prompt
when there is none (Qwen2.5) gives the system role a negative per-message
value: a system message replaces the default, so totals stay exact but that
one message's ``message_tokens`` can be small or negative.

Tool definitions use ``ChatFraming``'s default constants and tool calls
``TOOL_CALL_OVERHEAD``: OpenAI's formula, an approximation for open models.
A template that cannot be probed falls back to ``DEFAULT_FRAMING`` with an
``EstimateWarning``; if only the system probe fails (Gemma rejects system
messages), it warns and system messages take the user framing.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ctxwindow.errors import EncodingDataError
from ctxwindow.extras import install_hint
from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer
from ctxwindow.tokens.counter import EstimateWarning, TokenCounter

if TYPE_CHECKING:
    from jinja2 import Template
    from tokenizers import Tokenizer

INSTALL_HINT = install_hint("hf")

DEFAULT_FRAMING = ChatFraming(per_message=4, per_name=1, reply_priming=3)
"""Framing for a model without a usable chat template: conservative defaults, not exact."""

_TOKENIZER_FILE = "tokenizer.json"
_CONFIG_FILE = "tokenizer_config.json"
_TEMPLATE_FILE = "chat_template.jinja"
_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
_PROBE = "X"
_PROBE_NAME = "N"
_SENTINEL = "\ue000"  # a private-use character: found again in the rendering
_EDGE = " \n\t"
# Contents whose edges may merge with the framing or be trimmed by the template.
_EDGE_PROBES = (
    *("", " ", "\n", "\n\n", "\t", " X", "  X", "\nX", "\n\nX", "\n X", "\tX"),
    *("X ", "X\n", "X\n\n", " X\n", "1", "!", "中", "😀", "X!"),
)


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


@dataclass(frozen=True)
class ContentLayout:
    """How a chat template lays one role's content into the rendering, as measured.

    ``lstrip``/``rstrip``: the template trims that end of the content (Llama 3's
    ``| trim``), so that whitespace costs nothing. ``lead`` and ``trail``: the
    rendered text around the content up to and including the nearest added
    token on each side, set only when probing showed that content can merge
    with it (a leading newline joining the newline before it); the content is
    then counted inside them, minus ``cost``, what they add around the probe.
    """

    lstrip: bool = False
    rstrip: bool = False
    lead: str = ""
    trail: str = ""
    cost: int = 0

    def text(self, content: str) -> str:
        """The content as the template renders it."""
        if self.lstrip:
            content = content.lstrip()
        return content.rstrip() if self.rstrip else content

    def tokens(self, counter: TokenCounter, content: str) -> int:
        """Tokens ``content`` adds to a message with this layout."""
        text = self.text(content)
        if not (self.lead or self.trail):
            return counter.count(text)
        return counter.count(self.lead + text + self.trail) - self.cost


class TemplateChatTokenizer(ChatTokenizer):
    """A ``ChatTokenizer`` whose framing was measured from a chat template.

    ``per_role`` maps each probed role to its per-message cost (the template
    may frame roles differently); other roles cost ``framing.per_message``.
    With ``names_rendered=False`` a message's ``name`` costs nothing, because
    the template drops it. ``layouts`` says, per probed role, how its text
    content is rendered (trimmed, merging with the framing); other roles'
    content is counted as it is.
    """

    def __init__(
        self,
        counter: TokenCounter,
        framing: ChatFraming,
        model: str = "",
        *,
        per_role: Mapping[str, int] | None = None,
        names_rendered: bool = True,
        layouts: Mapping[str, ContentLayout] | None = None,
    ) -> None:
        super().__init__(counter, framing, model)
        self.per_role = dict(per_role or {})
        self.names_rendered = names_rendered
        self.layouts = dict(layouts or {})

    def message_tokens(self, message: Mapping[str, Any]) -> int:
        """Tokens one message adds to the rendered conversation."""
        dropped = ("content",) if self.names_rendered else ("content", "name")
        fields = {key: value for key, value in message.items() if key not in dropped}
        default = self.framing.per_message
        role = message.get("role")
        role = role if isinstance(role, str) else ""
        framing = super().message_tokens(fields) - default + self.per_role.get(role, default)
        return framing + self._content_tokens(message.get("content"), self.layouts.get(role))

    def _content_tokens(self, content: Any, layout: ContentLayout | None) -> int:
        if layout is None:
            return self.content_tokens(content)
        if isinstance(content, str):
            return layout.tokens(self.counter, content)
        if isinstance(content, list):
            return self.content_tokens(_trim_parts(content, layout))
        return self.content_tokens(content)


def _trim_parts(parts: list[Any], layout: ContentLayout) -> list[Any]:
    """Text parts with the ends of the whole text trimmed as the layout trims a string."""
    texts = [
        i
        for i, part in enumerate(parts)
        if isinstance(part, Mapping) and part.get("type") == "text"
    ]
    if not texts:
        return parts
    trimmed = list(parts)
    first, last = texts[0], texts[-1]
    if layout.lstrip:
        trimmed[first] = dict(trimmed[first], text=str(trimmed[first]["text"]).lstrip())
    if layout.rstrip:
        trimmed[last] = dict(trimmed[last], text=str(trimmed[last]["text"]).rstrip())
    return trimmed


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
        return _measure(_Renderer(_compile(template), _template_context(config), counter))
    except _Unprobeable as exc:
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
        raise _Unprobeable("it lists several templates but none named 'default'")
    raise _Unprobeable(f"chat_template is a {type(template).__name__}, not text")


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


# -- rendering, as transformers' apply_chat_template does ---------------------------


class _Unprobeable(Exception):
    """The chat template cannot be rendered on the probe conversations."""


def _compile(source: str) -> Template:
    try:
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:
        raise ImportError(f"chat templates need 'jinja2': {INSTALL_HINT}") from exc
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise _Unprobeable(f"it does not compile: {exc}") from exc


def _raise_exception(message: str) -> NoReturn:
    from jinja2 import TemplateError

    raise TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@dataclass(frozen=True)
class _Renderer:
    """Renders probe conversations and counts the result."""

    template: Template
    context: Mapping[str, str]
    counter: HuggingFaceCounter

    def text(self, messages: Sequence[Mapping[str, str]], prompt: bool = False) -> str:
        try:
            return self.template.render(
                messages=list(messages), add_generation_prompt=prompt, tools=None, **self.context
            )
        except Exception as exc:  # a template is third-party code: any error means "cannot"
            raise _Unprobeable(f"rendering {_roles(messages)} raised {exc!r}") from exc

    def tokens(self, messages: Sequence[Mapping[str, str]], prompt: bool = False) -> int:
        return self.counter.count(self.text(messages, prompt))


def _roles(messages: Sequence[Mapping[str, str]]) -> str:
    return "[" + ", ".join(m["role"] for m in messages) + "]"


def _message(role: str, **extra: str) -> dict[str, str]:
    return {"role": role, "content": _PROBE, **extra}


def _conversation(role: str, content: str = _PROBE) -> list[dict[str, str]]:
    """The probe conversation that ends (system: starts) with the measured ``role`` message."""
    measured = {"role": role, "content": content}
    if role == "system":
        return [measured, _message("user")]
    if role == "assistant":
        return [_message("user"), measured]
    return [_message("user"), _message("assistant"), measured]


# -- measuring the framing ------------------------------------------------------------


def _measure(renderer: _Renderer) -> TemplateChatTokenizer:
    """Probe the template and build the tokenizer whose counts add up to its renderings."""
    count = renderer.counter.count
    user = _message("user")
    one = renderer.tokens([user])
    two = renderer.tokens(_conversation("assistant"))
    three = renderer.tokens(_conversation("user"))
    per_role = {
        "user": three - two - count(_PROBE) - count("user"),
        "assistant": two - one - count(_PROBE) - count("assistant"),
    }
    system = _system_cost(renderer, one)
    if system is not None:
        per_role["system"] = system
    constant = one - (three - two)  # BOS, a default system prompt...
    generation = renderer.tokens([user], prompt=True) - one
    per_name, names_rendered = _name_cost(renderer, one)
    framing = ChatFraming(
        per_message=per_role["user"], per_name=per_name, reply_priming=constant + generation
    )
    return TemplateChatTokenizer(
        renderer.counter,
        framing,
        model=renderer.counter.name,
        per_role=per_role,
        names_rendered=names_rendered,
        layouts={role: _layout(renderer, role) for role in per_role},
    )


def _system_cost(renderer: _Renderer, user_only: int) -> int | None:
    """Per-message cost of a system message; ``None`` (with a warning) if the template refuses."""
    count = renderer.counter.count
    try:
        with_system = renderer.tokens(_conversation("system"))
    except _Unprobeable as exc:
        warnings.warn(
            f"the chat template of {renderer.counter.name!r} rejects a system message ({exc}); "
            "system messages are counted with the user framing",
            EstimateWarning,
            stacklevel=4,
        )
        return None
    return with_system - user_only - count(_PROBE) - count("system")


def _name_cost(renderer: _Renderer, user_only: int) -> tuple[int, bool]:
    """``(per_name, names_rendered)``; a template that fails on names keeps per_name 0."""
    user = _message("user")
    try:
        named_text = renderer.text([_message("user", name=_PROBE_NAME)])
    except _Unprobeable:
        return 0, True
    if named_text == renderer.text([user]):
        return 0, False
    named = renderer.counter.count(named_text)
    return named - user_only - renderer.counter.count(_PROBE_NAME), True


# -- measuring how content is laid into the framing -------------------------------------


def _layout(renderer: _Renderer, role: str) -> ContentLayout:
    """How ``role``'s content renders: trimmed ends, and whether it merges with the framing.

    Content is counted on its own (and cached as such) unless that misses the
    rendering of some ``_EDGE_PROBES`` content and counting it in context
    misses fewer.
    """

    def rendered(content: str) -> str:
        return renderer.text(_conversation(role, content))

    counter = renderer.counter
    try:
        plain = rendered(_PROBE)
        trimmed = ContentLayout(
            lstrip=rendered(_EDGE + _PROBE) == plain, rstrip=rendered(_PROBE + _EDGE) == plain
        )
        context = _in_context(counter, trimmed, rendered(_SENTINEL))
    except _Unprobeable:
        return ContentLayout()
    base = counter.count(plain) - counter.count(_PROBE)
    truth: dict[str, int] = {}
    for content in _EDGE_PROBES:
        with suppress(_Unprobeable):  # a template may reject, say, empty content
            truth[content] = counter.count(rendered(content)) - base
    misses = _misses(counter, trimmed, truth)
    if misses and context is not None and _misses(counter, context, truth) < misses:
        return context
    return trimmed


def _in_context(
    counter: HuggingFaceCounter, layout: ContentLayout, text: str
) -> ContentLayout | None:
    """``layout`` counting content inside the text around ``_SENTINEL`` in ``text``.

    The text around reaches to the nearest added token on each side (included):
    tokenization never crosses an added token, so nothing further can merge.
    """
    at = text.find(_SENTINEL)
    if at < 0:  # the template changed the content beyond trimming
        return None
    before, after = text[:at], text[at + len(_SENTINEL) :]
    added = counter.added_tokens()
    start = max((before.rfind(token) for token in added), default=-1)
    lead = before[max(start, 0) :]
    ends = [after.find(token) + len(token) for token in added if token in after]
    trail = after[: min(ends)] if ends else after
    if not (lead or trail):
        return None
    cost = counter.count(lead + _PROBE + trail) - counter.count(_PROBE)
    return replace(layout, lead=lead, trail=trail, cost=cost)


def _misses(counter: HuggingFaceCounter, layout: ContentLayout, truth: Mapping[str, int]) -> int:
    return sum(layout.tokens(counter, content) != n for content, n in truth.items())
