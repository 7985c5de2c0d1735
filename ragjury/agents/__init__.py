"""The agents: one module per role. An agent never touches the bus."""

from ragjury.agents.aggregator import Aggregator
from ragjury.agents.base import Agent
from ragjury.agents.chunker import Chunker
from ragjury.agents.critics import GroundednessCritic, RelevanceCritic, StandaloneCritic
from ragjury.agents.deduplicator import Deduplicator
from ragjury.agents.generator import Generator

__all__ = [
    "Agent",
    "Aggregator",
    "Chunker",
    "Deduplicator",
    "Generator",
    "GroundednessCritic",
    "RelevanceCritic",
    "StandaloneCritic",
]
