"""What every command run shares: a run row in the store, an LLM whose every call is
recorded there, a clock, the summary written at the end, and the budget-stop report."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import anyio
import anyio.to_thread
from rich.console import Console

from ragjury import gc_pauses
from ragjury._json import JSONData
from ragjury.commands._display import estimate_table
from ragjury.config import Settings
from ragjury.estimate import Estimate
from ragjury.llm import LLM
from ragjury.output import write_text_atomically
from ragjury.pricing import PRICES_AS_OF, PriceTable
from ragjury.prompts import Prompt
from ragjury.report.gates import GateResult, reason_line
from ragjury.runner import intake_capacity
from ragjury.schemas import Document
from ragjury.store import Store, open_store, redacted
from ragjury.store.base import CallLog, Job

# The exit codes a CI job can trust (the README's table; tests/test_exit_codes.py):
EXIT_INVALID_INPUT = 1
"""Some input records were invalid and skipped; the rest were judged and passed."""
EXIT_MAX_FAILED = 3
"""More judgements failed than ``--max-failed`` allows."""
EXIT_NOTHING_JUDGED = 4
"""Nothing was judged: every judgement failed (an endpoint down or hanging, answers that
never validate) or was not applicable."""
EXIT_GATE = 5
"""A ``--fail-under`` bar was not met, or (``compare``) a metric regressed more than
``--fail-on-regression`` allows."""
EXIT_BUDGET = 6
"""The run stopped taking new work at ``--max-tokens`` / ``--max-cost``; the rest is queued."""
EXIT_INTERRUPTED = 130  # stopped by SIGINT / SIGTERM; the rest stays queued


def max_failed_gate(failed: int, max_failed: int | None) -> list[GateResult]:
    """``--max-failed N``: at most N failed judgements (a sample's metric, all metrics)."""
    if max_failed is None:
        return []
    name = f"--max-failed {max_failed}"
    if failed > max_failed:
        return [GateResult(name, False, f"{failed} judgement(s) failed, more than {max_failed}")]
    return [GateResult(name, True, f"{failed} judgement(s) failed, at most {max_failed}")]


def results_gate(
    console: Console,
    command: str,
    gates: Sequence[GateResult] = (),
    *,
    failed: int = 0,
    judged: int = 0,
    not_applicable: int = 0,
) -> int | None:
    """Say in one line why the results did not pass, and return its exit code; None when
    they did.

    ``failed`` and ``not_applicable`` judgements out of ``judged`` (all outcomes): when all
    failed, or all were not applicable, nothing was judged (:data:`EXIT_NOTHING_JUDGED`).
    ``gates`` are ``--max-failed`` (:data:`EXIT_MAX_FAILED`), ``--fail-under`` or
    ``--fail-on-regression`` (:data:`EXIT_GATE`); each failed one is named with its value
    and its bar."""
    code: int | None = None
    if judged and failed == judged:
        reason = (
            f"nothing was judged: all {failed} judgement(s) failed (each failure's error is in "
            "the output: an endpoint that is down or hanging, or a model whose answers never "
            "validate)"
        )
        code = EXIT_NOTHING_JUDGED
    elif judged and not_applicable == judged:
        reason = (
            f"nothing was judged: all {judged} judgement(s) were not applicable (each says why "
            "in the output: samples without the fields the metrics need, or answers that "
            "state nothing)"
        )
        code = EXIT_NOTHING_JUDGED
    else:
        over = [g for g in gates if not g.passed and g.name.startswith("--max-failed")]
        line = reason_line(over) or reason_line(gates)
        if line is None:
            return None
        reason, code = line, EXIT_MAX_FAILED if over else EXIT_GATE
    console.print(f"ragjury {command}: {reason}", soft_wrap=True, markup=False, highlight=False)
    return code


class JobTotals(TypedDict):
    """A resumed job's LLM use over all its runs (``job_totals`` in ``--summary``)."""

    runs: int
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


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
        """Add the run's accounting, store the summary with the run and, if asked, write it
        as JSON."""
        usage = self.llm.usage
        summary.update(usage.totals())
        model = self.llm.settings.model
        unpriced = usage.unpriced_models()
        if summary["cost_usd"] == 0 and self.llm.prices.price(model) is None:
            # no call made, so nothing was priced: still unknown, not free
            summary["cost_usd"] = None
            unpriced = sorted({*unpriced, model})
        summary.update(
            by_stage=usage.by_stage(),
            calls_by_mode=usage.by_mode(),
            unpriced_models=unpriced,
            prices_as_of=PRICES_AS_OF,
            rate_limit=self.llm.limiter.snapshot(),
            endpoint_down={
                "outages": self.llm.breaker.outages,
                "down_seconds": round(self.llm.breaker.down_seconds, 1),
                "probes": self.llm.breaker.probes,
            },
            budget=self.llm.budget.as_dict(),
            run_id=self.run_id,
            db=self.store.location,
        )
        if summary.get("resumed") and isinstance(summary.get("job"), str):
            summary["job_totals"] = await self._job_totals(summary["job"], summary)
        await self.store.finish_run(self.run_id, summary)
        if path is not None:
            text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
            await anyio.to_thread.run_sync(write_text_atomically, path, text)

    async def _job_totals(self, job_id: str, summary: Mapping[str, object]) -> JobTotals:
        """What a resumed job took over every run so far: the earlier runs' stored
        summaries and this one's (whose own figures stay beside them)."""
        runs: list[Mapping[str, object]] = [
            r.summary for r in await self.store.job_runs(job_id) if r.summary
        ]
        runs.append(summary)

        def total(key: str) -> float | None:
            values = [run.get(key) for run in runs]
            known = [float(v) for v in values if isinstance(v, int | float)]
            return sum(known) if len(known) == len(values) else None

        cost = total("cost_usd")  # None when a run had no price: the job's cost is not known
        return JobTotals(
            runs=len(runs),
            llm_calls=int(total("llm_calls") or 0),
            prompt_tokens=int(total("prompt_tokens") or 0),
            completion_tokens=int(total("completion_tokens") or 0),
            cost_usd=None if cost is None else round(cost, 6),
        )


async def report_estimate(
    estimate: Estimate,
    settings: Settings,
    args: argparse.Namespace,
    console: Console,
    batch_judges: frozenset[str] = frozenset(),
) -> int:
    """Print a ``--dry-run`` estimate (and write it to ``--summary``); no LLM is called."""
    data = estimate.as_dict(PriceTable(settings.prices), batched_stages(settings, batch_judges))
    console.print(estimate_table(data))
    if args.summary is not None:
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        await anyio.to_thread.run_sync(write_text_atomically, args.summary, text)
    return 0


def batched_stages(
    settings: Settings, batch_judges: frozenset[str] = frozenset()
) -> Callable[[str], bool]:
    """Which stages of a run go through a batch API: every one with ``--batch``, else the
    stages of the panel's judges named in ``--batch-judges`` (``role@judge``)."""
    return lambda stage: (
        settings.batch or ("@" in stage and stage.rpartition("@")[2] in batch_judges)
    )


def budget_stop(llm: LLM, *, what: str, submitted: int, total: int) -> str | None:
    """The message for a run the budget cut short, or None if all its work went in."""
    reason = llm.budget.reason
    if reason is None or submitted >= total:
        return None
    return (
        f"ragjury: budget reached: {reason}. Stopped taking new {what} after {submitted} of "
        f"{total}; the work in flight was finished and everything finished is written. "
        f"Raise the budget to do the other {total - submitted}."
    )


def stopped_early(
    console: Console,
    settings: Settings,
    budget: str | None,
    unfinished: int,
    total: int,
    what: str,
    *,
    budget_reached: str | None = None,
) -> int | None:
    """Say why a job run ended before its last item, and the exit code; None if it did not.

    ``budget`` is :func:`budget_stop`'s message; ``what`` names the items ("document").
    ``budget_reached`` is the budget's reason when it was reached at all: reached after every
    item had been taken, it is only a note, since the run finished everything."""
    if budget is None and budget_reached is not None and not unfinished:
        console.print(
            f"ragjury: note: budget reached ({budget_reached}) after every {what} had been "
            f"taken, so the run finished them all. Up to {intake_capacity(settings)} {what}s "
            "are worked at once; lower --items-in-flight to stop closer to the budget.",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        return None
    if budget is not None:
        message, code = f"{budget} The rest stays queued in {settings.db_shown}.", EXIT_BUDGET
    elif unfinished:
        message, code = (
            f"ragjury: stopped with {unfinished} of {total} {what}(s) not finished; they stay "
            f"queued in {settings.db_shown}.",
            EXIT_INTERRUPTED,
        )
    else:
        return None
    console.print(
        message + " Run the same command again to resume: finished work is not redone.",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    return code


async def new_job_note(store: Store, job: Job, what: str) -> str | None:
    """For a job just created: what sets it apart from the last job of the same kind and size
    in the database (the same input run with another option), in one line; None when no
    such job exists or nothing tells them apart."""
    if not job.created:
        return None
    earlier = [j for j in await store.jobs(limit=50) if j.kind == job.kind and j.id != job.id]
    same_size = [j for j in earlier if j.size == job.size]
    if not same_size:
        return None
    before = same_size[0]
    changed = _changed_options(before.options, job.options)
    if not changed:
        return None  # same options: other items
    return (
        f"ragjury: new job {job.id}: the last job of {job.size} {what}(s) in this database "
        f"({before.id}) had another {', '.join(changed)}; what it judged is kept there, and "
        "steps asked the same way come from the cache"
    )


def _changed_options(before: Mapping[str, JSONData], now: Mapping[str, JSONData]) -> list[str]:
    names = {
        "llm": "model",
        "prompts": "prompt",
        "judges": "judge file",
        "fresh": "--no-cache",
        "embedding": "embedding model",
        "panel": "judge panel",
    }
    changed: list[str] = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key), now.get(key)
        if old == new:
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):  # the kind's options
            changed += [
                name.replace("_", "-")
                for name in sorted(set(old) | set(new))
                if old.get(name) != new.get(name)
            ]
        else:
            changed.append(names.get(key, key.replace("_", "-")))
    return changed


def retried_text(job: Job, what: str) -> str:
    """The resume message's note on items done again after endpoint failures, or ''."""
    if not job.retried:
        return ""
    return (
        f" ({job.retried} {what}(s) again, because the endpoint failed on some of their "
        "steps last time; their other steps come from the cache)"
    )


@asynccontextmanager
async def recorded_run(
    settings: Settings, command: str, *, require_endpoint: bool = True
) -> AsyncIterator[RecordedRun]:
    """The store, the run row and the LLM for one command; the heap is settled first
    (:mod:`ragjury.gc_pauses`), since this process is ragjury's own."""
    gc_pauses.settle(llm=require_endpoint)
    async with open_store(
        settings.db, concurrency=settings.concurrency, reconnect=settings.db_reconnect
    ) as store:
        recorded = settings.model_dump(mode="json", exclude={"api_key"})
        for name in ("base_url", "db"):  # a password in a URL is never stored
            if recorded.get(name):
                recorded[name] = redacted(recorded[name])
        run_id = await store.start_run(command, recorded)
        llm = LLM(
            settings,
            on_call=lambda stats, error: store.record_call(run_id, stats, error),
            on_start=lambda stats: store.open_call(run_id, stats),
            run_id=run_id,
            require_endpoint=require_endpoint,
            ledger=store,  # one rate limit per endpoint for every process on this database
        )
        async with llm:
            yield RecordedRun(store, run_id, llm)


async def propose_for_run(
    llm: LLM,
    store: CallLog,
    settings: Settings,
    documents: Callable[[], Iterable[Document]],
    count: int,
    prompts: Mapping[str, Prompt],
    console: Console,
) -> Settings:
    """``--personas auto[:N]``: ``settings`` drafting for the personas the model proposes
    (from the step cache when this corpus was asked before), printed."""
    from ragjury.persona_proposal import propose_personas, with_personas
    from ragjury.personas import persona_lines
    from ragjury.store.cache import llm_fingerprint

    personas = await propose_personas(
        llm,
        store,
        documents(),
        settings.generate,
        count,
        prompt=prompts.get("personas"),
        use_cache=settings.cache,
        model=llm_fingerprint(settings),
    )
    console.print(
        f"ragjury: --personas auto: {len(personas)} personas proposed for these documents "
        "(kept with the job; the same command proposes them again from the cache):",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for line in persona_lines(personas):
        console.print(f"  - {line}", markup=False, highlight=False, soft_wrap=True)
    return settings.model_copy(update={"generate": with_personas(settings.generate, personas)})
