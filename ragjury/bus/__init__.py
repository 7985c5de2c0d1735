"""The message bus: an interface and its in-memory implementation."""

from ragjury.bus.base import Bus, Delivery, Subscription
from ragjury.bus.memory import MemoryBus

__all__ = ["Bus", "Delivery", "MemoryBus", "Subscription"]
