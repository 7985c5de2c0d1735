"""Assertions on RAG answers for test suites: what the pytest plugin's ``jury`` fixture is.

::

    def test_answer_is_grounded(jury):
        jury.assert_faithful(question=..., answer=..., contexts=[...], min_score=0.8)

Plain, synchronous calls (a ``Jury`` runs in an event loop of its own, in a thread), so they
work in any test. Every judgement goes through the database ``settings.db``: each sample is
a job keyed by its content, and every agent step is kept in the step cache, so running an
unchanged suite again makes no LLM request. A failed assertion says why: the unsupported
statements with their reasons, the judge's reasoning, the failed keyword checks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, aclosing
from types import TracebackType
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from ragjury._json import JSONData
from ragjury.agents.custom_judge import load_judges
from ragjury.config import Settings
from ragjury.jury import Jury
from ragjury.metrics import Metric, Registry, registry
from ragjury.results import EvaluationResult
from ragjury.runner import scored_samples
from ragjury.schemas import MetricResult, Sample

_SHOWN_CHARS = 300


def sample_id(fields: Mapping[str, JSONData]) -> str:
    """An id from the sample's content: the same test asks the same question of the same job."""
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False, default=list)
    return "test-" + hashlib.sha256(text.encode()).hexdigest()[:20]


def _short(text: object) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= _SHOWN_CHARS else flat[: _SHOWN_CHARS - 1] + "…"


def explain(metric: str, result: MetricResult) -> str:
    """Why a metric's judgement came out as it did, in lines for a failure message."""
    lines = [f"reason: {result.reason}"] if result.reason else []
    details = result.details
    unsupported = [s for s in details.get("statements") or [] if not s.get("supported")]
    if unsupported:
        lines.append("unsupported statements:")
        lines.extend(f"  - {_short(s['text'])!r}: {s.get('reason')}" for s in unsupported)
    if details.get("reasoning"):
        lines.append(f"reasoning: {_short(details['reasoning'])}")
    failed = [c for c in details.get("checks") or [] if not c.get("passed")]
    if failed:
        lines.append("failed checks:")
        lines.extend(f"  - {c['type']} {c['keyword']!r}" for c in failed)
    lines.extend(  # graded parts of a metric (a rubric's criteria)
        f"{name}: {grade['score']} ({_short(grade.get('reasoning', ''))})"
        for name, grade in details.items()
        if isinstance(grade, dict) and "score" in grade
    )
    if result.error is not None:
        error = result.error
        lines.append(f"failed at {error.stage} after {error.attempts} attempt(s): {error.message}")
        if error.last_raw_output:
            lines.append(f"last raw output: {_short(error.last_raw_output)}")
    return "\n".join(lines)


class JuryAssertions(AbstractContextManager["JuryAssertions"]):
    """A :class:`Jury` for tests: ``with JuryAssertions(settings) as jury: jury.assert_...``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stack = ExitStack()
        self._portal: BlockingPortal | None = None
        self._jury: Jury | None = None

    def __enter__(self) -> JuryAssertions:
        portal = self._stack.enter_context(start_blocking_portal())
        try:
            self._jury = self._stack.enter_context(
                portal.wrap_async_context_manager(Jury(self.settings))
            )
        except BaseException:
            self._stack.close()
            raise
        self._portal = portal
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._portal = self._jury = None
        self._stack.close()

    def evaluate(
        self,
        *,
        question: str,
        answer: str,
        contexts: Sequence[str] = (),
        reference: str | None = None,
        metrics: Sequence[str] | None = None,
        **expectations: Sequence[str],
    ) -> EvaluationResult:
        """Judge one answer (``expectations``: must_contain, must_not_contain, ...)."""
        if self._portal is None:
            raise RuntimeError("use JuryAssertions inside 'with JuryAssertions(settings) as jury'")
        fields: dict[str, JSONData] = {
            "question": question,
            "answer": answer,
            "contexts": tuple(contexts),
            "reference": reference,
            **{k: tuple(v) for k, v in expectations.items()},
        }
        sample = Sample(id=sample_id({**fields, "metrics": metrics}), **fields)
        return self._portal.call(self._judge, sample, metrics)

    async def _judge(self, sample: Sample, metrics: Sequence[str] | None) -> EvaluationResult:
        assert self._jury is not None
        job = await self._jury.submit_samples([sample], metrics=metrics)
        async with aclosing(self._jury.events()) as events:
            async for _ in events:
                pass  # works the job until it is done (at once if it was done before)
        return await self._stored(job, sample)

    async def _stored(self, job: str, sample: Sample) -> EvaluationResult:
        """The job's stored result: the one place this module reads the store."""
        assert self._jury is not None
        for scored in await scored_samples(await self._jury.store(), job):
            if scored.sample.id == sample.id:
                return EvaluationResult.from_scored(scored)
        raise AssertionError(
            f"ragjury could not judge the sample (job {job} in {self.settings.db} has no "
            "result for it): see the log above, or `ragjury status --db` for the job"
        )

    def assert_metric(
        self,
        metric: str,
        *,
        question: str,
        answer: str,
        contexts: Sequence[str] = (),
        reference: str | None = None,
        min_score: float | None = None,
        allow_not_applicable: bool = False,
        **expectations: Sequence[str],
    ) -> MetricResult:
        """Assert that ``metric`` scores at least ``min_score`` (default: that it passes its
        threshold from the settings). Returns the metric's result."""
        __tracebackhide__ = True
        result = self.evaluate(
            question=question,
            answer=answer,
            contexts=contexts,
            reference=reference,
            metrics=[metric],
            **expectations,
        )[metric]
        head = f"{metric} of the answer to {_short(question)!r}"
        if result.outcome == "failed":
            raise AssertionError(f"{head} could not be judged\n{explain(metric, result)}")
        if result.outcome == "not_applicable":
            if allow_not_applicable:
                return result
            raise AssertionError(
                f"{head} is not applicable (pass allow_not_applicable=True to accept that)\n"
                + explain(metric, result)
            )
        score = "no score" if result.score is None else f"{result.score:g}"
        if min_score is not None:
            if result.score is None or result.score < min_score:
                raise AssertionError(
                    f"{head}: {score} is below {min_score:g}\n{explain(metric, result)}"
                )
        elif result.passing is False:
            raise AssertionError(f"{head} does not pass ({score})\n{explain(metric, result)}")
        return result

    def __getattr__(self, name: str) -> Callable[..., MetricResult]:
        """``jury.assert_<metric>(question, <the metric's inputs>..., min_score=None)`` for
        every declared metric (and the names a declaration adds, ``assert_faithful``,
        ``assert_correct``): :meth:`assert_metric` with the inputs in the declared order."""
        if name.startswith("_"):
            raise AttributeError(name)
        known = registry(load_judges(self.settings.judges))
        metric = _assertion(known, name)
        if metric is None:
            raise AttributeError(
                f"{type(self).__name__!r} has no attribute {name!r}; the assertions are "
                f"assert_metric and {', '.join(_assertion_names(known))}"
            )
        fields = ("question", *(f for f in metric.inputs if f != "question"))

        def assertion(*args: Any, **kwargs: Any) -> MetricResult:
            __tracebackhide__ = True
            if len(args) > len(fields):
                raise TypeError(f"{name} takes {', '.join(fields)} and keywords; got {args!r}")
            given = dict(zip(fields, args, strict=False)) | kwargs
            return self.assert_metric(metric.name, **given)

        assertion.__name__ = name
        assertion.__doc__ = f"Assert that {metric.name} passes: {metric.description}"
        return assertion


def _assertion(known: Registry, name: str) -> Metric | None:
    for metric in known:
        if name in (f"assert_{metric.name}", metric.assertion):
            return metric
    return None


def _assertion_names(known: Registry) -> list[str]:
    names = []
    for metric in known:
        names.append(f"assert_{metric.name}")
        if metric.assertion:
            names.append(metric.assertion)
    return names
