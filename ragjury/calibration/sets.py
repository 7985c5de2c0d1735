"""The human-labelled sets shipped with ragjury (``ragjury calibrate --list``).

Each folder of ``data/`` holds ``samples.jsonl`` (sample fields, the person's verdict in
``human``), the source's LICENSE and NOTICE, and ``about.toml``: the judge it calibrates,
what the label means, where it came from and its licence. ``tools/build_calibration_sets.py``
rebuilds them from the public sets.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ragjury.calibration import LABEL_FIELD

DATA = Path(__file__).parent / "data"


class BundledSet(BaseModel):
    """One shipped set, as its ``about.toml`` describes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    metric: str
    """The judge it calibrates unless ``--metric`` names another."""
    title: str
    description: str
    human: str
    """What the label means."""
    source: str
    licence: str
    path: Path
    size: int
    passed: int
    """Records the person passed (the rest they failed)."""


@functools.cache
def bundled_sets() -> tuple[BundledSet, ...]:
    """Every shipped set, by name."""
    found = []
    for folder in sorted(p for p in DATA.iterdir() if (p / "about.toml").is_file()):
        about = tomllib.loads((folder / "about.toml").read_text(encoding="utf-8"))
        path = folder / "samples.jsonl"
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line]
        passed = sum(f'"{LABEL_FIELD}": true' in line for line in lines)
        found.append(
            BundledSet(name=folder.name, path=path, size=len(lines), passed=passed, **about)
        )
    return tuple(found)


def bundled_set(name: str) -> BundledSet | None:
    return next((s for s in bundled_sets() if s.name == name), None)
