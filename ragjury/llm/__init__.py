"""The LLM client: instructor + AsyncOpenAI, retries, concurrency limit, accounting.

The client (and with it openai and instructor) is imported when first asked for, so that a
module that needs only ``ragjury.llm.tokens`` or ``ragjury.llm.usage`` does not load them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragjury._lazy import lazy_names

if TYPE_CHECKING:
    from ragjury.llm.client import LLM as LLM
    from ragjury.llm.client import Message as Message
    from ragjury.llm.usage import CallStats as CallStats
    from ragjury.llm.usage import StageUsage as StageUsage
    from ragjury.llm.usage import UsageLedger as UsageLedger

_WHERE = {
    "LLM": "ragjury.llm.client",
    "Message": "ragjury.llm.client",
    "CallStats": "ragjury.llm.usage",
    "StageUsage": "ragjury.llm.usage",
    "UsageLedger": "ragjury.llm.usage",
}


__getattr__ = lazy_names(__name__, _WHERE)


__all__ = ["LLM", "CallStats", "Message", "StageUsage", "UsageLedger"]
