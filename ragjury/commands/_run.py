"""What every command run shares: a run row in the store, an LLM whose every call is
recorded there, a clock, and the summary written at the end."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ragjury.config import Settings
from ragjury.llm import LLM
from ragjury.store import Store


@dataclass
class RecordedRun:
    store: Store
    run_id: str
    llm: LLM
    started: float = field(default_factory=time.perf_counter)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    async def finish(self, summary: dict[str, Any], path: Path | None) -> None:
        """Store the summary with the run and, if asked, write it as JSON."""
        summary.update(run_id=self.run_id, db=str(self.store.path))
        await self.store.finish_run(self.run_id, summary)
        if path is not None:
            text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
            await anyio.Path(path).write_text(text, encoding="utf-8")


@asynccontextmanager
async def recorded_run(
    settings: Settings, command: str, *, require_endpoint: bool = True
) -> AsyncIterator[RecordedRun]:
    async with Store(settings.db) as store:
        run_id = await store.start_run(
            command, settings.model_dump(mode="json", exclude={"api_key"})
        )
        llm = LLM(
            settings,
            on_call=lambda stats, error: store.record_call(run_id, stats, error),
            require_endpoint=require_endpoint,
        )
        async with llm:
            yield RecordedRun(store, run_id, llm)
