"""A real openai client pointed at the FakeOpenAI test server, for the tests of the server."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

from fakeopenai import (
    FakeOpenAI,
)


def client_for(fake: FakeOpenAI, **kwargs: Any) -> AsyncOpenAI:
    """A real client pointed at the fake; use it as ``async with client_for(fake) as client``."""
    kwargs.setdefault("max_retries", 0)
    return AsyncOpenAI(base_url=fake.base_url, api_key="test", **kwargs)


def as_agent(agent: str) -> dict[str, str]:
    return {"x-ragjury-agent": agent}


async def ask(client: AsyncOpenAI, agent: str, prompt: str = "hi") -> str | None:
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}], extra_headers=as_agent(agent)
    )
    return completion.choices[0].message.content
