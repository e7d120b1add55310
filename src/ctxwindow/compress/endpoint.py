"""An async completion function for any OpenAI-compatible chat endpoint.

The summary is its own request, ``stream: false``: the reply is read whole
and checked before it is used (``LLMSummarizer``), and nothing of it goes
anywhere as it is generated, so no client sees a summary being written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine
from typing import Any

from ctxwindow.errors import CompressionError
from ctxwindow.extras import install_hint
from ctxwindow.messages import Message

INSTALL_HINT = install_hint("llm")


def openai_completion(
    base_url: str,
    model: str,
    api_key: str | None = None,
    timeout: float = 30.0,
    max_tokens: int = 512,
    max_retries: int = 2,
) -> Callable[[list[Message]], Coroutine[Any, Any, str]]:
    """``complete(messages) -> str`` through the ``openai`` SDK's ``AsyncOpenAI``.

    The key is ``api_key``, else ``CTXWINDOW_LLM_API_KEY``, else
    ``OPENAI_API_KEY`` (a placeholder for local servers that need none).
    Requests use ``temperature=0``, ``max_tokens`` and ``stream=False``. Each
    call opens its own client, so the function works from any event loop (the
    caller's, or an ``LLMSummarizer``'s background thread). SDK errors, and a
    reply that is no chat completion (an HTML error page, a stream, an error
    object), become ``CompressionError``.

    >>> complete = openai_completion("http://127.0.0.1:8000/v1", "my-model")
    """
    try:
        import openai
    except ImportError as exc:
        raise ImportError(f"LLM summaries need the openai SDK: {INSTALL_HINT}") from exc
    options = _client_options(base_url, api_key, timeout, max_retries)

    async def complete(messages: list[Message]) -> str:
        try:
            async with openai.AsyncOpenAI(**options) as client:
                response = await client.chat.completions.create(
                    model=model,
                    messages=messages,  # type: ignore[arg-type]
                    temperature=0,
                    max_tokens=max_tokens,
                    stream=False,
                )
        except openai.OpenAIError as exc:
            raise CompressionError(f"the summary endpoint {base_url} failed: {exc}") from exc
        return _reply_text(response, base_url)

    return complete


def _client_options(
    base_url: str, api_key: str | None, timeout: float, max_retries: int
) -> dict[str, Any]:
    """``AsyncOpenAI`` arguments; without ``api_key``, the key from the environment."""
    key = api_key or os.environ.get("CTXWINDOW_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
    return {
        "base_url": base_url,
        "api_key": key or "not-needed",
        "timeout": timeout,
        "max_retries": max_retries,
    }


def _reply_text(response: object, base_url: str) -> str:
    """The first choice's text ("" for none); a reply without choices is an error.

    The SDK hands over a body that is not JSON (an HTML error page, a stream) as
    text, and one without the fields it expects as it is: neither is a reply.
    """
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        error = getattr(response, "error", None)
        what = f"an error: {error}" if error else "no choices"
        if isinstance(response, str):
            what = f"no chat completion but {_start(response)!r}"
        raise CompressionError(f"the summary endpoint {base_url} returned {what}")
    content = getattr(choices[0].message, "content", None)
    return content if isinstance(content, str) else ""


def _start(text: str) -> str:
    """The start of a body, for an error message."""
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:79] + "…"
