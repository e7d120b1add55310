"""Token counting: exact, offline, per model (see docs/tokens.md)."""

from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer, chat_tokenizer, count_tokens
from ctxwindow.tokens.counter import (
    BpeOpenAICounter,
    CachedCounter,
    EstimateCounter,
    EstimateWarning,
    TiktokenCounter,
    TokenCounter,
)
from ctxwindow.tokens.encodings import get_encoding
from ctxwindow.tokens.hf import HuggingFaceCounter, hf_chat_tokenizer
from ctxwindow.tokens.models import ModelInfo, known_models, model_info

__all__ = [
    "BpeOpenAICounter",
    "CachedCounter",
    "ChatFraming",
    "ChatTokenizer",
    "EstimateCounter",
    "EstimateWarning",
    "HuggingFaceCounter",
    "ModelInfo",
    "TiktokenCounter",
    "TokenCounter",
    "chat_tokenizer",
    "count_tokens",
    "get_encoding",
    "hf_chat_tokenizer",
    "known_models",
    "model_info",
]
