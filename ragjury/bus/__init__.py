"""The message bus: one contract, an in-memory and a durable (store-backed) implementation."""

from ragjury.bus.base import Bus, Delivery, Message, Subscription
from ragjury.bus.durable import DurableBus
from ragjury.bus.memory import MemoryBus

__all__ = ["Bus", "Delivery", "DurableBus", "MemoryBus", "Message", "Subscription"]
