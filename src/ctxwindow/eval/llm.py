"""Optional answer scoring through an OpenAI-compatible endpoint.

Only used when the user passes ``--llm-base-url`` and ``--llm-model``:
without them nothing in the evaluation touches the network. The API key is
read from ``CTXWINDOW_LLM_API_KEY`` (or ``OPENAI_API_KEY``); local servers
that need none get a placeholder.
"""

from __future__ import annotations

import os
import re
import unicodedata
from typing import Any

from ctxwindow.errors import CtxWindowError
from ctxwindow.eval.dataset import Question
from ctxwindow.extras import install_hint
from ctxwindow.messages import Message

INSTALL_HINT = install_hint("eval")
JUDGE_PROMPT = (
    "You grade answers to questions about a conversation. Reply with exactly YES if the "
    "candidate answer is correct and consistent with the reference answer, otherwise NO."
)


class LLMError(CtxWindowError):
    """The answering or judging endpoint failed; the text says how."""


_NOT_LETTER_OR_NUMBER = re.compile(r"[\W_]+")  # \w: letters and numbers (and _)


def normalize(text: str) -> str:
    """Casefolded NFKC text with punctuation, symbols, marks and spaces removed.

    >>> normalize("Ｔhe  A-1042, 东京！")
    'thea1042东京'
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _NOT_LETTER_OR_NUMBER.sub("", folded)


def match_score(reply: str, answer: str) -> float:
    """1.0 when the normalized answer equals or is contained in the normalized reply."""
    expected = normalize(answer)
    return 1.0 if expected and expected in normalize(reply) else 0.0


class OpenAIAnswerer:
    """Sends each built context to a model and scores the reply against the answer.

    ``judge=True`` asks the same model to grade the reply against the reference
    answer (YES/NO) instead of string matching.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        judge: bool = False,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int = 256,
    ) -> None:
        try:
            import openai
        except ImportError as exc:
            raise ImportError(f"answer scoring needs the openai SDK: {INSTALL_HINT}") from exc
        key = api_key or os.environ.get("CTXWINDOW_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self._client = openai.OpenAI(
            base_url=base_url, api_key=key or "not-needed", timeout=timeout, max_retries=max_retries
        )
        self._errors: tuple[type[Exception], ...] = (openai.OpenAIError,)
        self.model = model
        self.judge = judge
        self.max_tokens = max_tokens

    def __call__(self, messages: list[Message], question: Question) -> float:
        reply = self.complete(messages)
        if not self.judge:
            return match_score(reply, question.answer)
        verdict = self.complete(
            [
                {"role": "system", "content": JUDGE_PROMPT},
                {
                    "role": "user",
                    "content": f"Question: {question.question}\n"
                    f"Reference answer: {question.answer}\nCandidate answer: {reply}",
                },
            ]
        )
        return 1.0 if verdict.strip().upper().startswith("YES") else 0.0

    def complete(self, messages: list[Message]) -> str:
        """The model's reply text to ``messages``."""
        try:
            response: Any = self._client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=0,
                max_tokens=self.max_tokens,
            )
        except self._errors as exc:
            raise LLMError(f"the LLM endpoint failed: {exc}") from exc
        return str(response.choices[0].message.content or "")

    def close(self) -> None:
        self._client.close()
