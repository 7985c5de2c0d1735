"""Token estimates made before a request is sent (tpm reservations, ``--dry-run``).

No tokenizer is downloaded: English prose and code run at about four characters per token
with OpenAI's tokenizers, and within 20% of that with most others. The real counts the
endpoint reports afterwards are what the books record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ragjury._json import JSONData

CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD = 4
"""Tokens a chat format adds per message (role and separators)."""
COMPLETION_RESERVE = 256
"""Completion tokens a tpm reservation assumes before the real count is known."""

# Context windows (tokens) of models whose names start with these, longest prefix first.
_CONTEXTS = (
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gpt-3.5-turbo", 16_385),
)
DEFAULT_MAX_PROMPT_TOKENS = 128_000
"""The prompt size allowed for a model whose context window ragjury does not know."""


def context_of(model: str) -> int | None:
    """The context window of ``model`` in tokens, where ragjury knows it."""
    name = model.lower().rsplit("/", 1)[-1]
    return next((size for prefix, size in _CONTEXTS if name.startswith(prefix)), None)


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_prompt_tokens(messages: Iterable[Mapping[str, JSONData]]) -> int:
    """Prompt tokens of chat ``messages`` (string contents; other parts count as nothing)."""
    total = 0
    for message in messages:
        content = message.get("content")
        total += MESSAGE_OVERHEAD + (estimate_tokens(content) if isinstance(content, str) else 0)
    return total
