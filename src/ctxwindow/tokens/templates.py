"""A chat template's framing, measured by rendering probe conversations, and its counter.

``measure`` renders a model's chat template (``compile_template``: sandboxed,
as transformers' ``apply_chat_template`` renders it) on probe conversations
and builds the ``TemplateChatTokenizer`` whose counts add up to the
renderings. ``ctxwindow.tokens.hf`` finds the template and the tokenizer.

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
A template that cannot be probed (``Unprobeable``) falls back to
``ctxwindow.tokens.hf.DEFAULT_FRAMING`` with an ``EstimateWarning``; if only
the system probe fails (Gemma rejects system messages), it warns and system
messages take the user framing.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from ctxwindow.extras import install_hint
from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer
from ctxwindow.tokens.counter import EstimateWarning, TokenCounter

if TYPE_CHECKING:
    from jinja2 import Template

    from ctxwindow.tokens.hf import HuggingFaceCounter

_PROBE = "X"
_PROBE_NAME = "N"
_SENTINEL = "\ue000"  # a private-use character: found again in the rendering
_EDGE = " \n\t"
# Contents whose edges may merge with the framing or be trimmed by the template.
_EDGE_PROBES = (
    *("", " ", "\n", "\n\n", "\t", " X", "  X", "\nX", "\n\nX", "\n X", "\tX"),
    *("X ", "X\n", "X\n\n", " X\n", "1", "!", "中", "😀", "X!"),
)


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


# -- rendering, as transformers' apply_chat_template does ---------------------------


class Unprobeable(Exception):
    """The chat template cannot be rendered on the probe conversations."""


def compile_template(source: str) -> Template:
    try:
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:
        raise ImportError(f"chat templates need 'jinja2': {install_hint('hf')}") from exc
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise Unprobeable(f"it does not compile: {exc}") from exc


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
class Renderer:
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
            raise Unprobeable(f"rendering {_roles(messages)} raised {exc!r}") from exc

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


def measure(renderer: Renderer) -> TemplateChatTokenizer:
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


def _system_cost(renderer: Renderer, user_only: int) -> int | None:
    """Per-message cost of a system message; ``None`` (with a warning) if the template refuses."""
    count = renderer.counter.count
    try:
        with_system = renderer.tokens(_conversation("system"))
    except Unprobeable as exc:
        warnings.warn(
            f"the chat template of {renderer.counter.name!r} rejects a system message ({exc}); "
            "system messages are counted with the user framing",
            EstimateWarning,
            stacklevel=4,
        )
        return None
    return with_system - user_only - count(_PROBE) - count("system")


def _name_cost(renderer: Renderer, user_only: int) -> tuple[int, bool]:
    """``(per_name, names_rendered)``; a template that fails on names keeps per_name 0."""
    user = _message("user")
    try:
        named_text = renderer.text([_message("user", name=_PROBE_NAME)])
    except Unprobeable:
        return 0, True
    if named_text == renderer.text([user]):
        return 0, False
    named = renderer.counter.count(named_text)
    return named - user_only - renderer.counter.count(_PROBE_NAME), True


# -- measuring how content is laid into the framing -------------------------------------


def _layout(renderer: Renderer, role: str) -> ContentLayout:
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
    except Unprobeable:
        return ContentLayout()
    base = counter.count(plain) - counter.count(_PROBE)
    truth: dict[str, int] = {}
    for content in _EDGE_PROBES:
        with suppress(Unprobeable):  # a template may reject, say, empty content
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
