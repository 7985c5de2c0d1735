"""The command-line runs freeze their start-up heap so that full GC passes stay short."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragjury import gc_pauses
from ragjury.commands._run import recorded_run

from conftest import make_settings
from fakeopenai import FakeOpenAI


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # leave the test process as it was


def test_settle_freezes_what_is_allocated_and_preloads_the_lazy_modules(unfrozen: None) -> None:
    assert gc.get_freeze_count() == 0
    gc_pauses.settle()
    assert gc.get_freeze_count() > 10_000  # modules, classes and schemas: not walked again
    assert "instructor.v2.providers.openai.handlers" in sys.modules


def test_a_run_that_calls_no_model_freezes_without_loading_the_client() -> None:
    probe = (
        "import gc, sys; from ragjury import gc_pauses; gc_pauses.settle(llm=False); "
        "print(gc.get_freeze_count() > 0, sorted(m for m in ('openai', 'instructor') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "[]"]


@pytest.mark.anyio
async def test_a_command_run_settles_the_heap_before_its_first_call(
    unfrozen: None, fake: FakeOpenAI, tmp_path: Path
) -> None:
    assert gc.get_freeze_count() == 0
    async with recorded_run(make_settings(fake, tmp_path), "generate") as run:
        assert gc.get_freeze_count() > 0
        assert run.llm.usage.requests == 0
