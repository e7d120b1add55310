"""Token counting: exact, offline, per model (see docs/tokens.md)."""

from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer
from ctxwindow.tokens.counter import (
    BpeOpenAICounter,
    CachedCounter,
    EstimateCounter,
    EstimateWarning,
    TiktokenCounter,
    TokenCounter,
)
from ctxwindow.tokens.defaults import (
    chat_tokenizer,
    count_tokens,
    default_models,
    known_models,
    model_info,
    use_models,
)
from ctxwindow.tokens.encodings import get_encoding
from ctxwindow.tokens.hf import HuggingFaceCounter, hf_chat_tokenizer
from ctxwindow.tokens.models import Estimate, ModelInfo
from ctxwindow.tokens.registry import ModelRegistry

__all__ = [
    "BpeOpenAICounter",
    "CachedCounter",
    "ChatFraming",
    "ChatTokenizer",
    "Estimate",
    "EstimateCounter",
    "EstimateWarning",
    "HuggingFaceCounter",
    "ModelInfo",
    "ModelRegistry",
    "TiktokenCounter",
    "TokenCounter",
    "chat_tokenizer",
    "count_tokens",
    "default_models",
    "get_encoding",
    "hf_chat_tokenizer",
    "known_models",
    "model_info",
    "use_models",
]
