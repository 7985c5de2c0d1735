"""Judges users write in a file (``--judge politeness.toml``): a prompt, the sample fields it
reads, a scale and a pass mark, turned into a metric declared like the built-in ones.

::

    name = "politeness"
    description = "Is the answer polite and respectful to the user?"
    inputs = ["question", "answer"]
    scale = [1, 5]            # or [0, 1], or "boolean"
    pass_at = 4
    prompt = \"\"\"
    Rate how polite and respectful the answer is to the person who asked.
    Question: {{ question }}
    Answer: {{ answer }}
    \"\"\"

The judge writes its reasoning first, then its score, which is validated against the scale
(instructor re-asks an out-of-scale score, as for every judge). Every judge file of a job is
served by one agent, ``custom_judge``: one call per judge and sample, cached like any step
(the prompt's hash is in the fingerprint).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from ragjury._json import JSONData
from ragjury.agents.base import Step, failure_from
from ragjury.errors import ConfigurationError, LLMError
from ragjury.metrics.declaration import (
    BOOLEAN,
    FRACTION,
    BuildContext,
    EstimateContext,
    Metric,
    Scale,
)
from ragjury.prompts import Prompt
from ragjury.schemas import MetricResult, MetricScored, Sample, SampleSubmitted
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM

ROLE = "custom_judge"
INPUTS = ("question", "answer", "contexts", "reference", "reference_contexts")
"""The sample fields a judge file's prompt may read."""
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_COMPLETION_TOKENS = 120
_ENUMERATED = 10
"""Rating scales up to this wide list their scores in the schema."""
_SYSTEM = """You are a careful, impartial judge of one answer given by an assistant.
{description}
First write your reasoning in two to four sentences, citing what in the text decides it.
Then give your verdict: {verdict}
Judge only what you are asked to judge; do not reward length or confidence for their own sake.
--- user ---
"""


class JudgeFile(BaseModel):
    """What a judge file holds (validated; the error names the field and what is allowed)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str = Field(description="A new metric name: lower case letters, digits, underscores.")
    description: str = Field(min_length=1)
    inputs: tuple[str, ...] = Field(min_length=1)
    scale: tuple[float, float] | Literal["boolean"]
    pass_at: float | bool | None = None
    prompt: str = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"{value!r} is not a metric name: use lower case letters, digits and "
                "underscores, starting with a letter (e.g. 'politeness')"
            )
        return value

    @field_validator("inputs")
    @classmethod
    def _inputs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in INPUTS]
        if unknown:
            raise ValueError(
                f"unknown sample field(s) {', '.join(map(repr, unknown))}; allowed: "
                f"{', '.join(INPUTS)}"
            )
        return tuple(dict.fromkeys(value))

    @field_validator("scale")
    @classmethod
    def _scale(
        cls, value: tuple[float, float] | Literal["boolean"]
    ) -> tuple[float, float] | Literal["boolean"]:
        if value != "boolean":
            low, high = value
            if not low < high:
                raise ValueError(f"the low end must be below the high end, got [{low}, {high}]")
            if (low, high) != (0, 1) and not (float(low).is_integer() and float(high).is_integer()):
                raise ValueError(
                    "a rating scale runs between whole numbers, e.g. [1, 5]; [0, 1] is a fraction"
                )
        return value

    @property
    def declared_scale(self) -> Scale:
        if self.scale == "boolean":
            return BOOLEAN
        low, high = self.scale
        if (low, high) == (0, 1):
            return FRACTION
        return Scale("rating", float(low), float(high))

    def bar(self) -> float:
        if self.scale == "boolean":
            return 1.0
        assert self.pass_at is not None
        assert not isinstance(self.pass_at, bool)
        return float(self.pass_at)


def _explain(path: str, exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"][:1]) or "file"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "is missing"
        elif error["type"] == "extra_forbidden":
            message = (
                "is not a judge file field (fields: name, description, inputs, scale, "
                "pass_at, prompt)"
            )
        parts.append(f"{where} {message}")
    return f"judge file {path}: " + "; ".join(parts)


def judge_from_dict(data: JSONData, origin: str) -> Metric:
    """A judge file's contents as a metric declaration (``origin`` names the file)."""
    try:
        spec = JudgeFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigurationError(_explain(origin, exc)) from exc
    if spec.scale != "boolean" and (spec.pass_at is None or isinstance(spec.pass_at, bool)):
        raise ConfigurationError(
            f"judge file {origin}: a scale of {list(spec.scale)} needs pass_at, the lowest "
            f"passing score (e.g. pass_at = {spec.declared_scale.example()})"
        )
    scale = spec.declared_scale
    if spec.scale != "boolean" and not scale.contains(spec.bar()):
        raise ConfigurationError(
            f"judge file {origin}: pass_at = {spec.pass_at:g} is outside the scale "
            f"{scale.describe()}; give a score on that scale"
        )
    import jinja2  # here: the metric declarations import this module
    import jinja2.meta

    try:
        parsed = jinja2.Environment().parse(spec.prompt)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigurationError(
            f"judge file {origin}: prompt is not a valid template (line {exc.lineno}: "
            f"{exc.message})"
        ) from exc
    used = jinja2.meta.find_undeclared_variables(parsed)
    undeclared = sorted(used - set(spec.inputs))
    if undeclared:
        raise ConfigurationError(
            f"judge file {origin}: prompt uses {', '.join('{{ ' + v + ' }}' for v in undeclared)}"
            f" but inputs are {list(spec.inputs)}; add it to inputs (allowed: "
            f"{', '.join(INPUTS)}) or take it out of the prompt"
        )
    return Metric(
        name=spec.name,
        description=spec.description,
        scale=scale,
        threshold=spec.bar(),
        inputs=spec.inputs,
        agents={ROLE: _build},
        llm=True,
        prompts=(spec.name,),
        calls="1",
        estimate=_estimate,
        origin=f"judge file {origin}",
        extra={"file": dict(spec.model_dump(mode="json")), "origin": origin},
        own_prompt=prompt_of,
    )


def load_judge(path: str | Path) -> Metric:
    """Read a judge file (TOML)."""
    import tomllib  # here: the module is imported by every `ragjury --help`

    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the judge file {shown!r}: {exc.strerror}; check the path"
        ) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"judge file {shown} is not valid TOML: {exc}") from exc
    return judge_from_dict(data, shown)


def load_judges(paths: Sequence[str | Path]) -> list[Metric]:
    return [load_judge(path) for path in paths]


def is_judge_file(metric: Metric) -> bool:
    """Whether ``metric`` came from a judge file (its one agent is this module's)."""
    return metric.agents.keys() == {ROLE}


def stored(judges: Sequence[Metric]) -> list[dict[str, JSONData]]:
    """What a job keeps of its judge files, so any worker can rebuild them."""
    return [dict(judge.extra) for judge in judges if is_judge_file(judge)]


def from_stored(stored_judges: Sequence[Mapping[str, JSONData]]) -> list[Metric]:
    return [
        judge_from_dict(entry["file"], str(entry.get("origin", "kept"))) for entry in stored_judges
    ]


def _spec(metric: Metric) -> JudgeFile:
    return JudgeFile.model_validate(metric.extra["file"])


def prompt_of(metric: Metric) -> Prompt:
    """The judge's prompt: our instructions for the scale, then the file's prompt."""
    spec = _spec(metric)
    if spec.scale == "boolean":
        verdict = "true if the answer meets the criterion, false if it does not."
    else:
        low, high = spec.scale
        verdict = (
            f"a score from {low:g} to {high:g}, where {high:g} means the criterion is fully met "
            f"and {low:g} that it is not met at all."
            if (low, high) != (0, 1)
            else "a score between 0 and 1: the share of the criterion that is met."
        )
    system = _SYSTEM.format(description=spec.description, verdict=verdict)
    return Prompt(name=metric.name, source=system + spec.prompt.strip(), origin=metric.origin)


class _Judgment(BaseModel):
    """The custom judge's answer: why, then the verdict."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    reasoning: str = Field(min_length=1, description="Why, in a few sentences, before the score.")


@functools.cache  # a model class per scale, made once (an estimate asks for it per sample)
def judgment_model(scale: Scale) -> type[_Judgment]:
    """The response model of a judge on ``scale``: reasoning first, then a score that
    validates only on the scale (so an out-of-scale score is re-asked)."""
    if scale.kind == "boolean":
        return create_model(
            "Judgment",
            __base__=_Judgment,
            verdict=(bool, Field(description="true when the criterion is met.")),
        )
    assert scale.high is not None
    if scale.kind == "rating" and scale.high - scale.low <= _ENUMERATED:
        # the allowed scores spelled out: the schema's enum is what a local model's grammar
        # (and many a hosted model) holds to; a range alone lets it write 10 on 1-5
        allowed = tuple(range(int(scale.low), int(scale.high) + 1))
        # a type made at run time, for create_model (whose hints want a TypeForm since
        # pydantic 2.14, which a Literal built from values cannot be spelled as)
        kind: Any = Literal[allowed]
        field = Field(description=f"One of {', '.join(map(str, allowed))}.")
    else:
        kind = int if scale.kind == "rating" else float
        field = Field(ge=scale.low, le=scale.high, description=f"{scale.describe()}.")
    return create_model("Judgment", __base__=_Judgment, score=(kind, field))


class CustomJudge:
    """Every judge file of a job: one call per judge the sample asks for."""

    role: ClassVar[str] = ROLE
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, judges: Sequence[Metric], options: EvaluationOptions) -> None:
        self._llm, self._options = llm, options
        self._judges = [(judge, prompt_of(judge), judgment_model(judge.scale)) for judge in judges]

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        outputs = []
        for judge, prompt, model in self._judges:
            if judge.name in event.metrics:
                result = await self._judge(event.sample, judge, prompt, model)
                outputs.append(
                    MetricScored(sample_id=event.sample.id, metric=judge.name, result=result)
                )
        return outputs

    async def _judge(
        self, sample: Sample, judge: Metric, prompt: Prompt, model: type[_Judgment]
    ) -> MetricResult:
        missing = [name for name in judge.inputs if not _filled(sample, name)]
        if missing:
            return MetricResult.not_applicable(f"the sample has no {', '.join(missing)}")
        variables = {name: _value(sample, name) for name in judge.inputs}
        try:
            judgment, stats = await self._llm.structured_call(
                model, prompt.render(**variables), stage=f"{ROLE}:{judge.name}"
            )
        except LLMError as exc:
            return MetricResult.failed(failure_from(ROLE, exc), exc.attempts)
        values = judgment.model_dump()
        score = float(values["verdict"]) if "verdict" in values else float(values["score"])
        return MetricResult(
            outcome="scored",
            score=score,
            passing=judge.passes(score, self._options),
            reason=judgment.reasoning,
            details={"reasoning": judgment.reasoning},
            llm_calls=stats.requests,
        )


def _filled(sample: Sample, name: str) -> bool:
    value = getattr(sample, name)
    if isinstance(value, tuple):
        return any(str(v).strip() for v in value)
    return bool(value and str(value).strip())


def _value(sample: Sample, name: str) -> str | list[str] | None:
    """A sample field as a prompt shows it (one of :data:`INPUTS`: a text or a list of them)."""
    value: str | tuple[str, ...] | None = getattr(sample, name)
    return list(value) if isinstance(value, tuple) else value


def _build(c: BuildContext) -> Step:
    judges = [j for j in c.judges if is_judge_file(j)]
    parts = [(j.name, prompt_of(j).version, c.threshold(j.name)) for j in judges]
    return Step(CustomJudge(c.llm, judges, c.options), fingerprint(c.model, parts))


def _estimate(e: EstimateContext) -> None:
    judge = e.metric
    assert judge is not None
    if all(_filled(e.sample, name) or (name == "answer" and e.answer) for name in judge.inputs):
        variables = {name: _value(e.sample, name) for name in judge.inputs}
        if "answer" in variables:
            variables["answer"] = e.answer
        e.call(
            f"{ROLE}:{judge.name}",
            prompt_of(judge).render(**variables),
            judgment_model(judge.scale),
            _COMPLETION_TOKENS,
        )
