"""The agents of an evaluation job with a judge panel (``--judges``, ``--repeats``).

Each judge's agents are built from a context of its own (its model, endpoint and LLM
client). A role's agents sit behind one :class:`_LaneAgent`, which hands an event to the
judge its sample's lane names (``ragjury.evaluation.panel``); an event of the sample itself
(the metrics no panel judges: keyword tests, embeddings) goes to the role's ordinary agent.
:class:`PanelAggregator` joins the sample's own metrics and every lane of every panel metric,
then combines each panel metric's lanes into one result: the job's ``SampleScored``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, cast

from ragjury.agents.base import Step
from ragjury.agents.joins import JoinState
from ragjury.config import EvaluationOptions, Settings
from ragjury.evaluation.panel import combine_results
from ragjury.llm import LLM
from ragjury.metrics import BuildContext, Registry
from ragjury.schemas import (
    BusEvent,
    MetricResult,
    MetricScored,
    Sample,
    SampleScored,
    SampleSubmitted,
)
from ragjury.schemas.panel import Panel, lane_id, split_lane
from ragjury.store.cache import fingerprint

ContextFor = Callable[[LLM, Settings], BuildContext]


def _sample_id(event: BusEvent) -> str | None:
    sample = getattr(event, "sample", None)
    if isinstance(sample, Sample):
        return sample.id
    found = getattr(event, "sample_id", None)
    return found if isinstance(found, str) else None


class _LaneAgent:
    """One role of a panel job: each lane's event to its judge's agent, the sample's own
    events to the ordinary agent (when the role has one)."""

    def __init__(self, role: str, judges: Mapping[str, Step], own: Step | None) -> None:
        self.role = role
        self._judges, self._own = judges, own
        first = own or next(iter(judges.values()))
        # a Step keeps what its agent consumes as plain models; they are bus events
        self.consumes = cast("tuple[type[BusEvent], ...]", first.consumes)

    async def handle(self, event: BusEvent) -> Sequence[BusEvent]:
        found = _sample_id(event)
        lane = None if found is None else split_lane(found)
        if lane is None:
            return [] if self._own is None else await self._own.handle(event)
        return await self._judges[lane[1]].handle(event)


def panel_steps(
    metrics: Registry,
    names: Sequence[str],
    judged: Sequence[str],
    panel: Panel,
    llm: LLM,
    settings: Settings,
    context_for: ContextFor,
) -> dict[str, Step]:
    """The job's agents, but the sample aggregator: those of the metrics in ``judged`` once
    per judge (behind a lane agent), the others once, on the run's own client."""
    own_context = context_for(llm, settings)
    own: dict[str, Step] = {}
    for name in names:
        if name not in judged:
            for role, build in metrics[name].agents.items():
                own.setdefault(role, build(own_context))
    per_judge: dict[str, dict[str, Step]] = {}
    for judge in panel.judges:
        base_url = judge.base_url or settings.base_url
        client = llm.sibling(
            judge.name, judge.model, base_url, panel.temperature, batch=judge.batch
        )
        context = context_for(client, client.settings)
        for name in judged:
            for role, build in metrics[name].agents.items():
                roles = per_judge.setdefault(role, {})
                if judge.name not in roles:
                    roles[judge.name] = build(context)
    steps = dict(own)
    for role, judges in per_judge.items():
        prints = [s.fingerprint for s in (*judges.values(), *([own[role]] if role in own else []))]
        keyed = None if None in prints else fingerprint(*prints)
        steps[role] = Step(_LaneAgent(role, judges, own.get(role)), keyed)
    return steps


def lane_events(
    sample: Sample, names: Sequence[str], judged: Sequence[str], panel: Panel, by_target: bool
) -> list[BusEvent]:
    """A sample's first events in a panel job: the sample itself for the metrics no panel
    judges, and one copy per lane for those it does."""
    own = tuple(n for n in names if n not in judged)
    events: list[BusEvent] = [
        SampleSubmitted(sample=sample, metrics=own, answered_by_target=by_target)
    ]
    for judge, repeat in panel.lanes():
        copy = sample.model_copy(update={"id": lane_id(sample.id, judge, repeat)})
        events.append(SampleSubmitted(sample=copy, metrics=tuple(judged)))
    return events


class PanelAggregator:
    """The sample aggregator of a panel job: joins the sample's own metrics and each lane of
    the panel's, then combines the lanes (:func:`ragjury.evaluation.panel.combine_results`)."""

    role: ClassVar[str] = "sample_aggregator"
    consumes: ClassVar[tuple[type[SampleSubmitted | MetricScored], ...]] = (
        SampleSubmitted,
        MetricScored,
    )

    def __init__(
        self,
        joins: JoinState,
        metrics: Registry,
        names: Sequence[str],
        judged: Sequence[str],
        panel: Panel,
        options: EvaluationOptions,
    ) -> None:
        self._joins, self._metrics, self._panel, self._options = joins, metrics, panel, options
        self._names, self._judged = tuple(names), tuple(judged)

    async def handle(self, event: SampleSubmitted | MetricScored) -> list[SampleScored]:
        if isinstance(event, SampleSubmitted):
            if split_lane(event.sample.id) is not None:
                return []
            part = {"s:sample": event.model_dump_json()}
        else:
            lane = split_lane(event.sample_id)
            if (lane is None) == (event.metric in self._judged):
                return []  # not a result this job waits for
            key = (
                f"s:m:{event.metric}" if lane is None else f"s:l:{event.metric}|{lane[1]}#{lane[2]}"
            )
            part = {key: event.result.model_dump_json()}
        state = await self._joins.add(part, "s:")
        wanted = [f"s:m:{m}" for m in self._names if m not in self._judged] + [
            f"s:l:{m}|{judge}#{repeat}"
            for m in self._judged
            for judge, repeat in self._panel.lanes()
        ]
        if "s:sample" not in state or any(key not in state for key in wanted):
            return []
        submitted = SampleSubmitted.model_validate_json(state["s:sample"])
        results: dict[str, MetricResult] = {}
        for name in self._names:
            if name not in self._judged:
                results[name] = MetricResult.model_validate_json(state[f"s:m:{name}"])
                continue
            lanes = {
                (judge, repeat): MetricResult.model_validate_json(
                    state[f"s:l:{name}|{judge}#{repeat}"]
                )
                for judge, repeat in self._panel.lanes()
            }
            results[name] = combine_results(self._metrics[name], self._options, self._panel, lanes)
        return [
            SampleScored(
                sample=submitted.sample,
                metrics=results,
                answered_by_target=submitted.answered_by_target,
            )
        ]
