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


BUILD = """
import pydantic
import sys
from ragjury import gc_pauses
from ragjury.metrics import registry

registry()  # every agent module, so every schema module: their models defer their build

def pending():
    return sorted(
        f"{name}.{key}"
        for name, module in list(sys.modules.items())
        if name.startswith("ragjury")
        for key, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, pydantic.BaseModel)
        and value.__module__ == name and not value.__pydantic_complete__
    )

before = pending()
gc_pauses.build_models()
print(len(before), ",".join(pending()))
"""


def test_settle_builds_every_deferred_model_before_the_run_starts() -> None:
    """Built in one thread before any work (and frozen with the rest), not at first use."""
    done = subprocess.run(
        [sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=60, check=True
    )
    before, after = done.stdout.split(" ", 1)

    assert int(before) > 50
    assert after.strip() == ""


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
