"""Answer evaluation: the agents, the choice of metrics and the exported record.

Each sample is published with the metrics asked of it; every metric agent answers each
sample with exactly one MetricScored (scored, not_applicable or failed); the SampleAggregator
joins them into a SampleScored. :mod:`ragjury.jobs` wires the agents on a bus per job (and
asks the user's RAG system first for samples without an answer, when a target is given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from ragjury.agents import (
    Agent,
    ConfidenceScorer,
    CorrectnessJudge,
    KeywordChecker,
    RubricJudge,
    SampleAggregator,
    SimilarityScorer,
    StatementSplitter,
    VerdictJudge,
)
from ragjury.config import Settings
from ragjury.llm import LLM
from ragjury.prompts import Prompt
from ragjury.runtime import AgentSpec, agent_specs
from ragjury.schemas import (
    MetricName,
    Sample,
    SampleScored,
)
from ragjury.store.cache import fingerprint, llm_fingerprint

log = structlog.get_logger("ragjury.evaluation")

PROMPT_NAMES = ("splitter", "verdict", "correctness", "rubric")


def choose_metrics(
    samples: Sequence[Sample], requested: Sequence[MetricName] | None
) -> tuple[MetricName, ...]:
    """The metrics of a run: as requested, or faithfulness plus what the data allows."""
    if requested:
        return tuple(dict.fromkeys(requested))
    chosen: list[MetricName] = ["faithfulness"]
    if any(s.reference for s in samples):
        chosen.append("correctness")
    if any(s.must_contain or s.must_not_contain or s.must_not_start_with for s in samples):
        chosen.append("keywords")
    return tuple(chosen)


def result_record(scored: SampleScored) -> dict[str, Any]:
    """The exported form of a judged sample (the README documents these fields)."""
    metrics: dict[str, Any] = {}
    for name, result in scored.metrics.items():
        entry: dict[str, Any] = {
            "outcome": result.outcome,
            "score": result.score,
            "passing": result.passing,
            "reason": result.reason,
            **result.details,
            "llm_calls": result.llm_calls,
        }
        if result.error is not None:
            entry["error"] = result.error.model_dump()
        metrics[name] = entry
    sample = scored.sample
    return {
        "id": sample.id,
        "question": sample.question,
        "answer": sample.answer,
        "contexts": list(sample.contexts),
        "reference": sample.reference,
        "passing": scored.passing,
        "reason": scored.reason,
        "metrics": metrics,
    }


def build_agents(
    llm: LLM, settings: Settings, prompts: dict[str, Prompt] | None = None
) -> list[AgentSpec]:
    options = settings.evaluate
    prompts = prompts or {}

    def prompt(name: str) -> Prompt:
        return prompts.get(name) or Prompt.builtin(name)

    n = settings.concurrency
    agents: list[tuple[Agent, int]] = [
        (StatementSplitter(llm, prompt("splitter")), n),
        (VerdictJudge(llm, prompt("verdict"), options), n),
        (CorrectnessJudge(llm, prompt("correctness"), options), n),
        (RubricJudge(llm, prompt("rubric"), options), n),
        (KeywordChecker(options), 1),
        (SimilarityScorer(llm, options), n),
        (ConfidenceScorer(), 1),
        (SampleAggregator(), 1),
    ]
    model = llm_fingerprint(settings)
    fingerprints = {
        "statement_splitter": fingerprint(model, prompt("splitter").version),
        "verdict_judge": fingerprint(
            model,
            prompt("verdict").version,
            options.verdict_batch,
            options.context_window_chars,
            options.faithfulness_threshold,
        ),
        "correctness_judge": fingerprint(
            model, prompt("correctness").version, options.correctness_threshold
        ),
        "rubric_judge": fingerprint(model, prompt("rubric").version, options.rubric_threshold),
        "similarity_scorer": fingerprint(
            settings.base_url, settings.embedding_model, options.similarity_threshold
        ),
    }
    return agent_specs(agents, settings.workers, fingerprints)
