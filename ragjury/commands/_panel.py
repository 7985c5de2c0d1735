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
from ragjury.schemas.panel import Panel, PanelJudge, panel_of, parse_judges


def panel_from(args: argparse.Namespace, settings: Settings, chosen: list[Metric]) -> Panel | None:
    """The run's panel (None without ``--judges`` and ``--repeats``); a clear error when the
    flags are wrong or no chosen metric is judged by an LLM."""
    judges: tuple[PanelJudge, ...] = ()
    if args.judges:
        try:
            judges = parse_judges(args.judges, settings.panel)
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
