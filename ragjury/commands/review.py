"""``ragjury review export`` and ``ragjury review import``: the judges' verdicts out to
people, and their labels back into the database (:mod:`ragjury.calibration.review`)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import anyio
from rich.console import Console

from ragjury.calibration import LABEL_FIELD
from ragjury.calibration.review import (
    CRITIC_METRICS,
    LABEL_CONFIG,
    csv_text,
    label_studio_tasks,
    pair_review_items,
    read_review,
    review_items,
)
from ragjury.config import Settings
from ragjury.errors import ConfigurationError, InputError
from ragjury.output import write_text_atomically
from ragjury.report.load import load_files, records_from_db
from ragjury.store import open_store
from ragjury.store.base import StoredLabel


async def review_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.review_command == "export":
        return await _export(args)
    return await _import(args, settings)


async def _export(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    suffix = args.out.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise ConfigurationError(
            f"--out {args.out}: give a .json file (Label Studio tasks) or a .csv file (a "
            "spreadsheet)"
        )
    if (args.results is None) == (args.db is None):
        raise ConfigurationError(
            "give the evaluate results file, or --db (with --job) to read a job from the "
            "database, not both"
        )
    if args.db is not None and args.rejected is not None:
        raise ConfigurationError(
            f"--rejected {args.rejected}: a generate job in --db holds its rejected pairs "
            "already; give --rejected with the kept pairs' file instead of --db"
        )
    if args.db is not None:
        loaded = await records_from_db(args.db, args.job)
    else:
        results, rejected = args.results, args.rejected
        loaded = await anyio.to_thread.run_sync(lambda: load_files(results, rejected=rejected))
    if loaded.kind == "evaluation":
        items = review_items(loaded.records, args.metric)
    else:  # generated pairs: the critics' verdicts
        marks = {name: _pass_mark(name) for name in CRITIC_METRICS.values()}
        items = pair_review_items(loaded.records, marks, args.metric)
    if not items:
        raise InputError(f"{loaded.source}: no scored verdict to review")
    if suffix == ".csv":
        text = csv_text(items)
    else:
        text = json.dumps(label_studio_tasks(items), ensure_ascii=False, indent=1)
    await anyio.to_thread.run_sync(write_text_atomically, args.out, text)
    counts = Counter(item.metric for item in items)
    per_metric = ", ".join(f"{n} {metric}" for metric, n in counts.items())
    console.print(
        f"ragjury review: wrote {len(items)} item(s) to review ({per_metric}) to {args.out}",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    if suffix == ".json":
        config = args.out.with_suffix(".label-config.xml")
        await anyio.to_thread.run_sync(write_text_atomically, config, LABEL_CONFIG)
        console.print(
            f"ragjury review: in Label Studio, create a project with the labelling interface "
            f"in {config}, import {args.out}, label, then export as JSON and run `ragjury "
            "review import EXPORT.json --db ...`",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    else:
        console.print(
            f"ragjury review: fill the {LABEL_FIELD} column with pass/fail (or 1-5), then run "
            f"`ragjury review import {args.out} --db ...`",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    return 0


def _pass_mark(metric: str) -> float:
    """A critic metric's pass mark, as its declaration gives it."""
    from ragjury.metrics import registry

    threshold = registry()[metric].threshold
    assert threshold is not None  # the critics' metrics pass at a rating
    return float(threshold)


async def _import(args: argparse.Namespace, settings: Settings) -> int:
    console = Console(stderr=True)
    path: Path = args.file
    label_field = args.label_field or LABEL_FIELD
    found = await anyio.to_thread.run_sync(
        lambda: read_review(path, label_field=label_field, metric=args.metric)
    )
    if not found.labels:
        raise InputError(
            f"{path}: none of its {found.unlabelled} item(s) is labelled yet; label them "
            "first (Label Studio: export as JSON after annotating)"
        )
    rows = [
        StoredLabel(
            metric=x.metric,
            sample_id=x.sample.id,
            label=x.raw,
            sample=x.sample.model_dump_json(exclude_defaults=True),
            source=path.name,
            labelled_by=x.labelled_by,
        )
        for x in found.labels
    ]
    async with open_store(settings.db) as store:
        await store.put_labels(rows)
    counts = Counter(x.metric for x in found.labels)
    for metric, n in counts.items():
        console.print(
            f"ragjury review: imported {n} {metric} label(s) from {path} into "
            f"{settings.db_shown}; use them with `ragjury calibrate reviewed --metric {metric}` "
            f"or `ragjury evaluate ... --correct-with {metric}=reviewed` (same --db)",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    if found.unlabelled:
        console.print(
            f"ragjury review: {found.unlabelled} item(s) had no label and were skipped",
            markup=False,
            highlight=False,
        )
    return 0
