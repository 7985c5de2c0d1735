"""The LLM client: instructor + AsyncOpenAI, retries, concurrency limit, accounting."""

from ragjury.llm.client import LLM, Message
from ragjury.llm.usage import CallStats, StageUsage, UsageLedger

__all__ = ["LLM", "CallStats", "Message", "StageUsage", "UsageLedger"]
