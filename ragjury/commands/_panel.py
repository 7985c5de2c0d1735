"""``evaluate``'s judge panel: the panel from ``--judges``, ``--repeats`` and ``--combine``,
checked before anything runs, and its lines for a person at the end of a run."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.evaluation.panel import panel_metrics
from ragjury.llm.judge_endpoints import api_key_of, declared_for
from ragjury.metrics import Metric
from ragjury.schemas.panel import Panel, PanelJudge, panel_of, parse_judges, with_batch


def panel_from(args: argparse.Namespace, settings: Settings, chosen: list[Metric]) -> Panel | None:
    """The run's panel (None without ``--judges`` and ``--repeats``); a clear error when the
    flags are wrong or no chosen metric is judged by an LLM."""
    judges: tuple[PanelJudge, ...] = ()
    try:
        if args.judges:
            judges = parse_judges(args.judges, settings.panel)
        if getattr(args, "batch_judges", None):  # calibrate has no --batch-judges
            judges = with_batch(judges, args.batch_judges)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    for judge in judges:  # a key that is not set is said before any call
        declared = declared_for(settings, judge)
        if declared is not None:
            api_key_of(judge.name, declared)
    repeats = int(args.repeats or 1)
    if repeats < 1 or repeats > 50:
        raise ConfigurationError(f"--repeats must be 1 to 50, got {repeats}")
    panel = panel_of(
        judges, repeats, args.combine, model=settings.model, temperature=settings.temperature
    )
    if panel is not None and not panel_metrics(chosen):
        raise ConfigurationError(
            f"--judges and --repeats ask LLM judges again, but none of the metrics chosen "
            f"({', '.join(m.name for m in chosen)}) is judged by an LLM; choose one with "
            "--metrics (e.g. faithfulness or correctness)"
        )
    return panel


async def check_batch_judges(panel: Panel | None, settings: Settings) -> None:
    """The endpoints of the judges whose calls go through a batch API (``--batch-judges``,
    or every judge with ``--batch``) have one: a clear error naming the judge and the
    endpoint otherwise, before anything is sent. (With ``--batch`` the run checks its own
    endpoint itself.)"""
    if panel is None:
        return
    from ragjury.llm.batch_poller import check_batch_api
    from ragjury.runner.batching import endpoint_of

    checked = {endpoint_of(settings)} if settings.batch else set()
    for judge in panel.judges:
        there = settings.model_copy(update={"base_url": judge.base_url or settings.base_url})
        if not (judge.batch or settings.batch) or endpoint_of(there) in checked:
            continue
        checked.add(endpoint_of(there))
        await check_batch_api(
            there,
            who=f"judge {judge.name!r} (--batch-judges or --batch)",
            fix=f"leave {judge.name} out of --batch-judges"
            + (" and run without --batch" if settings.batch else ""),
        )


def priced(settings: Settings, panel: Panel | None) -> Settings:
    """``settings`` with the price each declared judge of ``panel`` has at its endpoint, for
    a ``--dry-run`` estimate (the run's clients take them from the declarations)."""
    prices = dict(settings.prices)
    for judge in panel.judges if panel is not None else ():
        declared = declared_for(settings, judge)
        if declared is not None and declared.price is not None:
            prices[judge.model] = declared.price
    return settings.model_copy(update={"prices": prices})


def panel_name(panel: Panel) -> str:
    """The panel as a calibration names its judge: ``panel of a (model-a), b (model-b)``,
    with the repeats."""
    judges = ", ".join(f"{j.name} ({j.model})" for j in panel.judges)
    times = f", {panel.repeats} repeats each" if panel.repeats > 1 else ""
    return f"panel of {judges} by {panel.combine}{times}"


def _figure(value: object) -> str:
    return "-" if value is None else f"{value}"


def panel_lines(summary: Mapping[str, object]) -> list[str]:
    """One line per panel metric (agreement, dissent, flips) and one of cost per judge."""
    panel = summary.get("panel")
    if not isinstance(panel, dict):
        return []
    lines = []
    for name, figures in (panel.get("metrics") or {}).items():
        lines.append(
            f"panel {name}: Fleiss' kappa {_figure(figures.get('fleiss_kappa'))}, "
            f"Krippendorff's alpha {_figure(figures.get('krippendorff_alpha'))}, judges "
            f"disagree on {figures.get('disagreements')} of {figures.get('samples')} sample(s), "
            f"flaky {figures.get('flaky_samples')} ({_figure(figures.get('flaky_share'))})"
        )
    costs = panel.get("cost_by_judge") or {}
    if costs:
        lines.append(
            "judges: "
            + "; ".join(
                f"{judge} {c['llm_calls']} calls, "
                + ("cost unknown" if c["cost_usd"] is None else f"${c['cost_usd']:.4f}")
                for judge, c in costs.items()
            )
        )
    return lines
