"""Samples with a person's verdict on each: what ``ragjury calibrate`` judges and compares.

A labelled file is a samples file (any format ``evaluate`` reads, the same field names and
``--field`` mappings) whose records also hold the person's label in one field (``human``
unless ``--label-field`` names another). A label is either pass/fail (``true``/``false``,
``1``/``0``, or the words yes/no, pass/fail, good/bad) or a whole rating from 1 to 5, which
passes from ``pass_at`` (4 unless given) up. One kind per file; a label of neither kind, or
a record without one, stops the run before any call, naming the line and the value.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ragjury.errors import InputError
from ragjury.evaluation.inputs import InvalidRecord, filled_fields, read_records
from ragjury.schemas import Sample

LabelKind = Literal["boolean", "rating"]
RATING_LOW, RATING_HIGH = 1, 5
DEFAULT_PASS_AT = 4
_TRUE = frozenset({"true", "yes", "pass", "passed", "good"})
_FALSE = frozenset({"false", "no", "fail", "failed", "bad"})
_KINDS = "true/false (or 1/0, yes/no, pass/fail) or a whole rating from 1 to 5"


@dataclass(frozen=True)
class Labelled:
    """A sample and the person's verdict on it."""

    sample: Sample
    label: bool | int
    human_pass: bool


@dataclass(frozen=True)
class LabelledSamples:
    source: str
    label_field: str
    kind: LabelKind
    pass_at: int | None
    """The lowest passing rating (1-5 labels only)."""
    items: list[Labelled]
    invalid: list[InvalidRecord]
    total: int
    """Labelled samples before ``--sample`` drew some of them."""

    @property
    def samples(self) -> list[Sample]:
        return [item.sample for item in self.items]

    @property
    def filled(self) -> frozenset[str]:
        return filled_fields(self.samples)

    @property
    def human_pass(self) -> dict[str, bool]:
        return {item.sample.id: item.human_pass for item in self.items}

    def drawn(self, n: int | None, seed: int) -> LabelledSamples:
        """``n`` of the samples drawn at random with ``seed`` (all of them when None or at
        least as many), kept in file order."""
        if n is None or n >= len(self.items):
            return self
        if n < 1:
            raise InputError(f"--sample {n}: give a number of samples of at least 1, e.g. 50")
        chosen = sorted(random.Random(seed).sample(range(len(self.items)), n))
        return replace(self, items=[self.items[i] for i in chosen])


def parse_label(value: object) -> bool | int | None:
    """A label as pass/fail or a whole number; None when it is neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and float(value).is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip().casefold()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        try:
            number = float(text)
        except ValueError:
            return None
        return int(number) if number.is_integer() else None
    return None


def _kind(labels: Sequence[tuple[int, bool | int]], source: str) -> LabelKind:
    numbers = [(line, v) for line, v in labels if not isinstance(v, bool)]
    if all(v in (0, 1) for _, v in numbers):
        return "boolean"
    off = next(
        ((line, v) for line, v in numbers if not RATING_LOW <= v <= RATING_HIGH),
        None,
    )
    if off is not None:
        raise InputError(
            f"{source}:{off[0]}: label {off[1]} is off the scale; a human label is {_KINDS}. "
            "Fix that record (or map your scale onto 1-5)"
        )
    words = next(((line, v) for line, v in labels if isinstance(v, bool)), None)
    if words is not None:
        raise InputError(
            f"{source}:{words[0]}: label {str(words[1]).lower()} is pass/fail but other records "
            "have 1-5 ratings; give every record the same kind of label"
        )
    return "rating"


def load_labelled(
    path: str | Path,
    label_field: str,
    *,
    fields: Mapping[str, str] | None = None,
    pass_at: int | None = None,
    shown: str | None = None,
) -> LabelledSamples:
    """The labelled samples of ``path``; ``shown`` names it in messages (a bundled set's
    name). Records that are not samples are skipped and listed (as ``evaluate`` does);
    a record without a label, or with a label of neither kind, is an error."""
    source = shown or str(path)
    samples: list[tuple[int, Sample, bool | int]] = []
    invalid: list[InvalidRecord] = []
    first_use: dict[str, int] = {}
    seen_fields: set[str] = set()
    for line, record, sample in read_records(path, fields):
        if isinstance(sample, str):
            invalid.append(InvalidRecord(line, sample))
            continue
        if sample.id in first_use:
            reason = (
                f"duplicate id {sample.id!r} (first used on line {first_use[sample.id]}); "
                "give every record a unique id"
            )
            invalid.append(InvalidRecord(line, reason))
            continue
        first_use[sample.id] = line
        raw = record.get(label_field) if isinstance(record, dict) else None
        if raw is None:
            if isinstance(record, dict):
                seen_fields.update(str(key) for key in record)
            samples.append((line, sample, -1))  # checked below, with every record seen
            continue
        label = parse_label(raw)
        if label is None:
            raise InputError(
                f"{source}:{line}: label {raw!r} in {label_field!r} is not a human label; "
                f"a label is {_KINDS}"
            )
        samples.append((line, sample, label))
    return labelled_samples(source, label_field, samples, invalid, pass_at, seen_fields)


def labelled_samples(
    source: str,
    label_field: str,
    samples: Sequence[tuple[int, Sample, bool | int]],
    invalid: list[InvalidRecord],
    pass_at: int | None,
    seen_fields: AbstractSet[str] = frozenset(),
) -> LabelledSamples:
    """Samples with their labels (-1: none), checked: every one labelled, one kind of
    label, a pass mark on the scale. ``samples`` are (line, sample, label)."""
    unlabelled = [line for line, _, label in samples if label == -1]
    if unlabelled and len(unlabelled) == len(samples):
        raise InputError(
            f"{source}: no record has the label field {label_field!r} (the records have "
            f"{', '.join(sorted(seen_fields)) or 'no fields'}); pass --label-field NAME to "
            "name the field that holds the person's verdict"
        )
    if unlabelled:
        raise InputError(
            f"{source}:{unlabelled[0]}: the record has no {label_field!r} label ("
            f"{len(unlabelled)} record(s) lack one); label every record, or leave the "
            "unlabelled ones out"
        )
    if not samples:
        raise InputError(f"{source}: no labelled sample to calibrate with")
    kind = _kind([(line, label) for line, _, label in samples], source)
    if kind == "boolean" and pass_at is not None:
        raise InputError(
            f"--label-pass-at {pass_at}: the labels of {source} are pass/fail, not 1-5 "
            "ratings; leave --label-pass-at out"
        )
    mark = None
    if kind == "rating":
        mark = DEFAULT_PASS_AT if pass_at is None else pass_at
        if not RATING_LOW <= mark <= RATING_HIGH:
            raise InputError(
                f"--label-pass-at {mark}: the labels run {RATING_LOW} to {RATING_HIGH}; give "
                f"the lowest passing rating on that scale, e.g. --label-pass-at {DEFAULT_PASS_AT}"
            )
    items = [
        Labelled(sample, label, bool(label) if mark is None else label >= mark)
        for _, sample, label in samples
    ]
    return LabelledSamples(source, label_field, kind, mark, items, invalid, len(items))
