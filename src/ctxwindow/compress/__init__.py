"""Compressors: entries and a target token count in, entries out.

Every compressor has one signature (``Compressor``): config in ``__init__``,
work in ``__call__(entries, target_tokens) -> list[Entry]``, where the target
is the wanted total of the returned entries' ``tokens`` (framing included,
as ``ChatTokenizer.message_tokens`` counts). A compressor

- never mutates its input: entries it changes come back as new ``Entry``
  objects (same ``seq``, ``id``, ``pinned``, ``priority``, ``kind``,
  ``created_at``; ``tokens`` recounted; ``metadata`` copied plus
  ``{"compressed": {"by": name, "from_tokens": n, "to_tokens": m}}``), the
  others as the same objects;
- changes only text ``content``: ``tool_calls``, ``tool_call_id`` and
  ``name`` stay as they are;
- returns its best effort when it cannot reach the target, and the entries
  unchanged when it does not apply: the caller compares the total with its
  budget, and a ``Chain`` moves on to the next compressor.

>>> from ctxwindow.messages import Entry
>>> from ctxwindow.tokens import chat_tokenizer
>>> tok = chat_tokenizer("gpt-4o")
>>> message = {"role": "tool", "tool_call_id": "c1", "content": "word " * 400}
>>> entry = Entry(message, tok.message_tokens(message), seq=1)
>>> compress = Chain(Structured(tok), Extractive(tok), Truncate(tok))
>>> [out] = compress([entry], 60)
>>> out.tokens <= 60, out.metadata["compressed"]["by"]
(True, 'truncate')
"""

from ctxwindow.compress.base import Compressor, total_tokens
from ctxwindow.compress.chain import Chain
from ctxwindow.compress.endpoint import openai_completion
from ctxwindow.compress.extractive import Extractive
from ctxwindow.compress.llm import LLMSummarizer
from ctxwindow.compress.rolling import RollingSummary
from ctxwindow.compress.sentences import split_sentences
from ctxwindow.compress.structured import Structured
from ctxwindow.compress.truncate import Truncate
from ctxwindow.errors import CompressionError

__all__ = [
    "Chain",
    "CompressionError",
    "Compressor",
    "Extractive",
    "LLMSummarizer",
    "RollingSummary",
    "Structured",
    "Truncate",
    "openai_completion",
    "split_sentences",
    "total_tokens",
]
