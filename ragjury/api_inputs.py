"""Samples as the Python API takes them: ``Sample`` objects or plain dicts, ids optional."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import structlog

from ragjury._json import JSONData
from ragjury.errors import InputError
from ragjury.evaluation.inputs import samples_from_records
from ragjury.schemas import Sample
from ragjury.text import clean_value

log = structlog.get_logger("ragjury.input")

__all__ = ["SampleInput", "as_samples"]

SampleInput: TypeAlias = Sample | Mapping[str, JSONData]
"""A ``Sample``, or a dict with the field names ``ragjury evaluate`` reads (``question``,
``answer``, ``contexts``, ``reference``, ... or the RAGAS and DeepEval names)."""


def as_samples(items: Iterable[SampleInput]) -> list[Sample]:
    """``items`` as samples; one without an id gets ``sample-{n}``, n its 1-based position,
    as ``ragjury evaluate`` names a record by its line. Raises InputError naming each bad
    item and what to fix, or repeated ids."""
    samples: list[Sample] = []
    problems: list[str] = []
    for position, item in enumerate(items, start=1):
        if isinstance(item, Sample):
            fields, repairs = clean_value(item.model_dump())
            if repairs:  # text no later step could encode: repaired, as at every intake
                log.warning(
                    "input_repaired",
                    sample=position,
                    repairs="; ".join(repairs),
                    say=f"sample {position}: {'; '.join(repairs)}, so the text can be stored "
                    "and sent",
                )
                item = Sample.model_validate(fields)
            numbered = item.model_copy(update={"id": f"sample-{position}"})
            samples.append(item if item.id else numbered)
            continue
        loaded = samples_from_records([dict(item) if isinstance(item, Mapping) else item], stem="")
        if loaded.invalid:
            problems.append(f"sample {position}: {loaded.invalid[0].reason}")
            continue
        sample = loaded.samples[0]
        if not isinstance(item, Mapping) or item.get("id") is None:
            sample = sample.model_copy(update={"id": f"sample-{position}"})
        samples.append(sample)
    if problems:
        raise InputError("; ".join(problems[:5]) + (" ..." if len(problems) > 5 else ""))
    repeated = sorted(i for i, n in Counter(s.id for s in samples).items() if n > 1)
    if repeated:
        raise InputError(
            f"sample ids must be unique; repeated: {', '.join(repeated[:5])}. Give each sample "
            "its own id, or leave ids out to have them numbered"
        )
    return samples
