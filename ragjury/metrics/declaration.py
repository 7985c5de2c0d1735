"""What a metric is: one declaration, read by everything that names metrics.

A :class:`Metric` says what the metric measures, which sample fields it needs, whether it
calls an LLM, its scale and pass rule, the agents that compute it (with what shapes their
cached output), the prompts they render, what a sample costs for ``--dry-run``, and how it
is summed up over a run. It is declared once, beside its agent (``ragjury/agents/*.py``), by a
plugin (entry-point group ``ragjury.metrics``) or from a judge file (``--judge FILE``); the
CLI, estimates, summaries, reports, gates, comparisons, the pytest assertions and ``Jury``
read it and keep no list of metrics of their own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard, get_args

from pydantic import BaseModel

from ragjury._json import JSONData, json_number
from ragjury.llm.tokens import estimate_prompt_tokens, estimate_tokens
from ragjury.prompts import Prompt
from ragjury.schemas import MetricResult, Sample

if TYPE_CHECKING:
    from ragjury.agents.base import Step
    from ragjury.config import EvaluationOptions, Settings
    from ragjury.llm import LLM

ScaleKind = Literal["fraction", "rating", "boolean", "count", "cosine", "perplexity"]
Aggregate = Literal["mean", "pass_rate"]


@dataclass(frozen=True)
class Scale:
    """What a score means: its range and which way is better."""

    kind: ScaleKind
    low: float
    high: float | None
    higher_is_better: bool = True

    def describe(self) -> str:
        if self.kind == "boolean":
            return "0 or 1 (false or true)"
        top = "unbounded" if self.high is None else f"{self.high:g}"
        return f"{self.low:g} to {top}"

    def contains(self, value: float) -> bool:
        return self.low <= value and (self.high is None or value <= self.high)

    @property
    def whole(self) -> bool:
        """Scores are whole numbers (a 1-5 rating, a count, a boolean)."""
        return self.kind in ("rating", "count", "boolean")

    def example(self) -> str:
        """A bar that makes sense on this scale, for error messages."""
        if self.kind == "rating" and self.high is not None:
            return f"{math.ceil(self.low + (self.high - self.low) * 0.75):g}"
        return "0.8" if self.high == 1 else f"{self.low:g}"

    def as_dict(self) -> dict[str, JSONData]:
        return {
            "kind": self.kind,
            "low": self.low,
            "high": self.high,
            "higher_is_better": self.higher_is_better,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JSONData]) -> Scale:
        """The scale :meth:`as_dict` wrote (a kind this version does not know reads as a
        fraction's)."""
        kind = data.get("kind", "fraction")
        high = data.get("high")
        return cls(
            kind=kind if _is_scale_kind(kind) else "fraction",
            low=json_number(data.get("low", 0.0)),
            high=None if high is None else json_number(high),
            higher_is_better=bool(data.get("higher_is_better", True)),
        )


def _is_scale_kind(value: JSONData) -> TypeGuard[ScaleKind]:
    return value in get_args(ScaleKind)


FRACTION = Scale("fraction", 0.0, 1.0)
RATING = Scale("rating", 1.0, 5.0)
BOOLEAN = Scale("boolean", 0.0, 1.0)
COSINE = Scale("cosine", -1.0, 1.0)
PERPLEXITY = Scale("perplexity", 1.0, None, higher_is_better=False)
"""An answer's perplexity: 1 is a certain model, higher is less sure."""


class BuildContext(Protocol):
    """What a metric's agents are built from (one per evaluation job)."""

    @property
    def llm(self) -> LLM: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def options(self) -> EvaluationOptions: ...

    @property
    def model(self) -> str:
        """A fingerprint of the LLM settings that change what it answers."""
        ...

    def prompt(self, name: str) -> Prompt:
        """The job's custom prompt of that name, else the built-in one."""
        ...

    def threshold(self, metric: str) -> float | None:
        """The metric's pass mark in this job (the option given, else its default)."""
        ...

    @property
    def judges(self) -> Sequence[Metric]:
        """The job's metrics from judge files (built by one shared agent)."""
        ...


class Tally(Protocol):
    """Extra figures a metric sums up over a run (keyword failure rates, retrieval at k)."""

    def add(self, result: MetricResult) -> None: ...

    def figures(self) -> dict[str, JSONData]: ...


@dataclass
class EstimateContext:
    """What a metric's ``estimate`` adds its calls to, for one sample of ``--dry-run``.

    ``answer`` is the answer to judge (the sample's, or an assumed one when a ``--target``
    would answer it) and ``contexts`` its non-blank contexts."""

    sample: Sample
    answer: str | None
    contexts: list[str]
    options: EvaluationOptions
    model: str
    embedding_model: str
    prompts: Mapping[str, Prompt]
    add: Callable[[str, str, int, int, int], None]
    """``add(stage, model, prompt_tokens, completion_tokens, calls)``."""
    metric: Metric | None = None
    """The metric being estimated (set before its ``estimate`` is called)."""

    def prompt(self, name: str) -> Prompt:
        return self.prompts.get(name) or Prompt.builtin(name)

    def call(
        self,
        stage: str,
        messages: Sequence[Mapping[str, JSONData]],
        schema: type[BaseModel],
        completion_tokens: int,
        calls: int = 1,
    ) -> None:
        """One call (or ``calls`` alike) of the chat model: the rendered messages plus the JSON
        schema instructor sends with them, and an assumed completion size."""
        prompt_tokens = estimate_prompt_tokens(messages) + schema_tokens(schema)
        self.add(stage, self.model, prompt_tokens * calls, completion_tokens, calls)


def schema_tokens(schema: type[BaseModel]) -> int:
    """Tokens of the JSON schema instructor sends with a request."""
    return math.ceil(estimate_tokens(json.dumps(schema.model_json_schema(), indent=2)) * 1.1)


def _plain(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


@dataclass(frozen=True)
class Metric:
    """One metric's declaration. See the module docstring for who reads it."""

    name: str
    description: str
    scale: Scale
    threshold: float | None
    """The default pass mark (``passes``); None: informational, the metric never fails."""
    inputs: tuple[str, ...]
    """Sample fields it needs; a sample without them is ``not_applicable``."""
    agents: Mapping[str, Callable[[BuildContext], Step]]
    """Role -> how a job builds that agent (several metrics may share a role)."""
    llm: bool
    optional: tuple[str, ...] = ()
    """Sample fields it uses when present."""
    prompts: tuple[str, ...] = ()
    """The prompt templates its agents render (their versions are stored with a run)."""
    calls: str = "0"
    """LLM calls per sample, in words, for ``ragjury metrics``."""
    estimate: Callable[[EstimateContext], None] | None = None
    """Adds a sample's calls to a ``--dry-run`` estimate (None: no LLM call)."""
    aggregate: Aggregate = "mean"
    """The figure that sums a run up: the mean score or the pass rate."""
    pass_rule: str | None = None
    """How ``passing`` is decided, in words, when it is not ``score >= threshold``."""
    result_type: type[MetricResult] = MetricResult
    """``Jury``'s typed result: the details as fields."""
    tally: Callable[[], Tally] | None = None
    by_default: Callable[[AbstractSet[str]], bool] | None = None
    """Chosen when ``--metrics`` is not given and the filled sample fields satisfy this."""
    groups: tuple[str, ...] = ()
    """Names that stand for several metrics on ``--metrics`` (``rag_triad``)."""
    evidence: bool = False
    """Its details' ``statements`` carry evidence quotes from the contexts (the report marks
    them in the contexts)."""
    logprobs: bool = False
    """It reads token logprobs, so a run asks the endpoint for them."""
    embeddings: bool = False
    """It asks the endpoint for embeddings, so ``--embedding-model`` is part of its job."""
    assertion: str | None = None
    """An extra name of its pytest assertion (``jury.assert_faithful``), beside
    ``jury.assert_<name>``."""
    order: int = 1000
    """Where it is listed: built-ins first, in the order users meet them."""
    origin: str = "builtin"
    extra: Mapping[str, JSONData] = field(default_factory=dict)
    """What a judge file said (kept with a job, so a worker can rebuild the metric)."""
    own_prompt: Callable[[Metric], Prompt] | None = None
    """The metric's one prompt when it is not a built-in template (a judge file's)."""

    def prompts_used(self, custom: Mapping[str, Prompt]) -> dict[str, Prompt]:
        """Each prompt its agents render: the custom one (``--prompt``), else the built-in,
        or the metric's own (a judge file's)."""
        if self.own_prompt is not None:
            prompt = self.own_prompt(self)
            return {prompt.name: prompt}
        return {name: custom.get(name) or Prompt.builtin(name) for name in self.prompts}

    def prompt_versions(self, custom: Mapping[str, Prompt]) -> dict[str, str]:
        """The version of each prompt its agents render (see :meth:`prompts_used`)."""
        return {name: prompt.version for name, prompt in self.prompts_used(custom).items()}

    def bar(self, options: EvaluationOptions) -> float | None:
        """The pass mark in effect: ``--threshold NAME=X`` (or ``--NAME-threshold``) when
        given, else the default; kept whole on a whole-number scale, so it hashes as before."""
        value = options.thresholds.get(self.name, self.threshold)
        if value is None:
            return None
        return _plain(value) if self.scale.whole else value

    def passes(self, score: float, options: EvaluationOptions) -> bool | None:
        bar = self.bar(options)
        if bar is None:
            return None
        return score >= bar if self.scale.higher_is_better else score <= bar

    def rule(self) -> str:
        """The pass rule in words, with the default pass mark."""
        if self.pass_rule:
            return self.pass_rule
        if self.threshold is None:
            return "none (informational)"
        if self.scale.kind == "boolean":
            return "score = 1 (true)"
        sign = ">=" if self.scale.higher_is_better else "<="
        return f"score {sign} {_plain(self.threshold):g}"

    def describe(self) -> dict[str, JSONData]:
        """The declaration as data (``ragjury metrics --json``, a run's summary)."""
        return {
            "name": self.name,
            "description": self.description,
            "scale": self.scale.as_dict(),
            "threshold": self.threshold,
            "pass_rule": self.rule(),
            "aggregate": self.aggregate,
            "inputs": list(self.inputs),
            "optional": list(self.optional),
            "llm": self.llm,
            "calls_per_sample": self.calls,
            "prompts": list(self.prompts),
            "agents": list(self.agents),
            "origin": self.origin,
        }
