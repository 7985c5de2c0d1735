"""The deduplicator's decisions as the store keeps them: a module of their own, so that the
agent that makes them loads no store interface (the agents are read for ``ragjury --help``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuestionDecision:
    """The deduplicator's stored decision on one drafted pair."""

    pair_id: str
    duplicate_of: str | None
    similarity: float | None
